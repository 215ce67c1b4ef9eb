//! The `vocabulary!` macro: a closed set of wire spellings as a Rust enum.

/// Defines a string-valued vocabulary: parse from the wire spelling, print it
/// back, and (de)serialise as that spelling.
macro_rules! vocabulary {
    ($(#[$meta:meta])* $vis:vis $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ::serde::Serialize, ::serde::Deserialize)]
        $vis enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant),+
        }

        impl $name {
            /// Every value, in the reference's declaration order.
            $vis const ALL: &'static [$name] = &[$($name::$variant),+];

            /// Every wire spelling, in the same order (a schema's enum).
            $vis const NAMES: &'static [&'static str] = &[$($text),+];

            /// The wire spelling.
            $vis fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// Exact, case-sensitive parse of the wire spelling (not every
            /// vocabulary is read back: the metrics' labels are only written).
            #[allow(clippy::should_implement_trait, dead_code)]
            $vis fn parse(text: &str) -> Option<$name> {
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
