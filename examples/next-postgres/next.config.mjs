/** @type {import('next').NextConfig} */
const nextConfig = {
  // Load the package with Node's own loader instead of bundling it: it is a
  // native addon. Both names, so either install works.
  serverExternalPackages: ["@byollm/server", "byollm-server-native"],
};

export default nextConfig;
