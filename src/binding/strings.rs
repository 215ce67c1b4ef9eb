//! The JavaScript string shapes the crypto exports take: an ASCII-first
//! copy for ciphertexts, a private key's text wiped on drop, and a string
//! read exactly (lone surrogates included).

use napi::bindgen_prelude::*;
use napi::ValueType;

use crate::json::JsStr;

/// Declares a string newtype to napi as a JavaScript string (its type name
/// and type check are `String`'s).
macro_rules! string_typed {
    ($name:ident) => {
        impl TypeName for $name {
            fn type_name() -> &'static str {
                String::type_name()
            }

            fn value_type() -> ValueType {
                String::value_type()
            }
        }

        impl ValidateNapiValue for $name {}
    };
}

/// A JavaScript string read into Rust without UTF-8 transcoding when it is
/// pure ASCII (as a ciphertext is): V8 then copies its one-byte form
/// straight out. A megabyte envelope's ciphertext is ~1.4 M characters, and
/// the UTF-8 writer costs a visible share of an open.
///
/// The Latin-1 getter alone cannot tell ASCII from other text: it keeps
/// only the low byte of each UTF-16 unit, so "Ł" (U+0141) would come out as
/// "A", and "é" as a lone 0xE9 byte where UTF-8 would give two. So the
/// string's UTF-8 length is asked first: it equals its UTF-16 length
/// exactly when every unit is ASCII (anything else, lone surrogates
/// included, takes two or more UTF-8 bytes). Every other string takes the
/// ordinary UTF-8 path, so what the core sees is the same text either way.
pub struct AsciiFirstString(pub String);

string_typed!(AsciiFirstString);

/// The string as bytes when every UTF-16 unit of it is ASCII, copied with
/// the Latin-1 getter; `None` for any other string, or a non-string.
///
/// # Safety
/// `env` and `napi_val` as napi hands them to `from_napi_value`.
unsafe fn read_ascii(env: napi::sys::napi_env, napi_val: napi::sys::napi_value) -> Option<String> {
    use napi::sys;
    if !super::LATIN1_IS_CHEAP {
        return None;
    }
    let mut utf8_len = 0usize;
    let mut units = 0usize;
    // SAFETY: length queries only (null buffer), as napi documents them.
    let queried = unsafe {
        sys::napi_get_value_string_utf8(env, napi_val, std::ptr::null_mut(), 0, &mut utf8_len)
            == sys::Status::napi_ok
            && sys::napi_get_value_string_latin1(env, napi_val, std::ptr::null_mut(), 0, &mut units)
                == sys::Status::napi_ok
    };
    if !queried || utf8_len != units {
        return None;
    }
    // Room for the terminating NUL napi always writes.
    let mut buf: Vec<u8> = Vec::with_capacity(units + 1);
    let mut written = 0usize;
    // SAFETY: the buffer has `units + 1` bytes of capacity, which is what
    // napi is told it may write; only `written` bytes are then claimed as
    // initialised (napi never reports more than it wrote).
    let status = unsafe {
        sys::napi_get_value_string_latin1(
            env,
            napi_val,
            buf.as_mut_ptr().cast(),
            units + 1,
            &mut written,
        )
    };
    if status != sys::Status::napi_ok || written > units {
        return None;
    }
    // SAFETY: see above; `written` bytes were initialised.
    unsafe { buf.set_len(written) };
    // Checked rather than assumed: an ASCII scan is cheap next to the
    // transcoding it replaces.
    if !buf.is_ascii() {
        return None;
    }
    // SAFETY: ASCII bytes are valid UTF-8.
    Some(unsafe { String::from_utf8_unchecked(buf) })
}

impl FromNapiValue for AsciiFirstString {
    unsafe fn from_napi_value(
        env: napi::sys::napi_env,
        napi_val: napi::sys::napi_value,
    ) -> Result<Self> {
        // SAFETY: forwarded as received from napi.
        if let Some(text) = unsafe { read_ascii(env, napi_val) } {
            return Ok(AsciiFirstString(text));
        }
        // Not a string, or not ASCII: the ordinary path (and its errors).
        unsafe { String::from_napi_value(env, napi_val) }.map(AsciiFirstString)
    }
}

impl ToNapiValue for AsciiFirstString {
    unsafe fn to_napi_value(env: napi::sys::napi_env, val: Self) -> Result<napi::sys::napi_value> {
        unsafe { String::to_napi_value(env, val.0) }
    }
}

/// A private key's text as it crosses the boundary: wiped when dropped
/// here (the engine's own copy is JavaScript's).
pub struct KeyText(pub(super) String);

string_typed!(KeyText);

impl std::ops::Deref for KeyText {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl Drop for KeyText {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

impl FromNapiValue for KeyText {
    unsafe fn from_napi_value(
        env: napi::sys::napi_env,
        napi_val: napi::sys::napi_value,
    ) -> Result<Self> {
        // SAFETY: forwarded as received from napi.
        unsafe { String::from_napi_value(env, napi_val) }.map(KeyText)
    }
}

impl ToNapiValue for KeyText {
    unsafe fn to_napi_value(env: napi::sys::napi_env, val: Self) -> Result<napi::sys::napi_value> {
        // SAFETY: forwarded as received from napi; `val` is wiped when it drops.
        unsafe { <&str>::to_napi_value(env, &val) }
    }
}

/// A JavaScript string exactly, lone surrogates included: ASCII through
/// [`AsciiFirstString`]'s copy, anything else as its UTF-16 units.
pub struct ExactString(pub JsStr);

string_typed!(ExactString);

impl FromNapiValue for ExactString {
    unsafe fn from_napi_value(
        env: napi::sys::napi_env,
        napi_val: napi::sys::napi_value,
    ) -> Result<Self> {
        // SAFETY: forwarded as received from napi.
        if let Some(text) = unsafe { read_ascii(env, napi_val) } {
            return Ok(ExactString(JsStr::new(text)));
        }
        // Not ASCII (or not a string: the UTF-16 read reports that).
        // SAFETY: forwarded as received from napi.
        let units = unsafe { Utf16String::from_napi_value(env, napi_val) }?;
        Ok(ExactString(JsStr::from_utf16(&units)))
    }
}
