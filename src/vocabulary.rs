//! The `vocabulary!` macro: a closed set of wire spellings as a Rust enum.

/// Defines a string-valued vocabulary: parse from the wire spelling, print it
/// back, and (de)serialise as that spelling.
macro_rules! vocabulary {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ::serde::Serialize, ::serde::Deserialize)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant),+
        }

        impl $name {
            /// Every value, in the reference's declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// Every wire spelling, in the same order (a schema's enum).
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            /// The wire spelling.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// Exact, case-sensitive parse of the wire spelling.
            #[allow(clippy::should_implement_trait)]
            pub fn parse(text: &str) -> Option<$name> {
                match text { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(crate) use vocabulary;
