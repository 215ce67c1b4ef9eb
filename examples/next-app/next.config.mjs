/** @type {import('next').NextConfig} */
const nextConfig = {
  // The one line byollm needs: load the package with Node's own loader at run
  // time instead of bundling it. byollm-server-native is a native addon (a
  // .node file found by its loader at run time), which a bundler cannot follow.
  serverExternalPackages: ["@byollm/server", "byollm-server-native"],
};

export default nextConfig;
