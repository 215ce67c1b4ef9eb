//! Encodings used on the wire.
