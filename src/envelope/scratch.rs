//! Per-thread reusable buffers for seal and open, zeroed after each use.

use zeroize::Zeroizing;

/// Scratch buffers above this capacity are released after use instead of kept.
const SCRATCH_KEEP: usize = 4 << 20;

/// Run `work` with two reusable byte buffers (decoded ciphertext, decoded
/// body), so opening large envelopes does not map and fault in fresh memory
/// every time. The buffers hold decrypted data, so the used part is zeroed
/// after use (a plain memset: the buffers stay alive, so it is not a dead
/// store the compiler could drop; `zeroize`'s byte-wise volatile writes cost
/// more than the rest of a megabyte open).
pub(super) fn with_scratch<T>(work: impl FnOnce(&mut Vec<u8>, &mut Vec<u8>) -> T) -> T {
    use std::cell::RefCell;
    thread_local! {
        static SCRATCH: RefCell<(Vec<u8>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new())) };
    }
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut pair) => {
            let (a, b) = &mut *pair;
            let out = work(a, b);
            for buf in [a, b] {
                buf.fill(0);
                buf.clear();
                if buf.capacity() > SCRATCH_KEEP {
                    *buf = Vec::new();
                }
            }
            out
        }
        // Re-entered (cannot happen today): fresh buffers.
        Err(_) => {
            let (mut a, mut b) = (Zeroizing::new(Vec::new()), Zeroizing::new(Vec::new()));
            work(&mut a, &mut b)
        }
    })
}

/// Run a seal's `work` with three reusable buffers (signed body, inner
/// JSON, sealed box), for the same reason as [`with_scratch`]: a large
/// payload's seal otherwise maps and faults in a few fresh megabytes each
/// time (a 1M-character seal spent more in page faults than in copies).
/// Strings are handed out empty; afterwards the used bytes are zeroed (they
/// hold the plaintext) and oversized buffers are released.
pub(super) fn with_seal_scratch<T>(
    work: impl FnOnce(&mut String, &mut String, &mut Vec<u8>) -> T,
) -> T {
    use std::cell::RefCell;
    thread_local! {
        static SEAL_SCRATCH: RefCell<[Vec<u8>; 3]> = const { RefCell::new([Vec::new(), Vec::new(), Vec::new()]) };
    }
    // An empty byte vector is always valid UTF-8: the string keeps its capacity.
    let as_string = |mut bytes: Vec<u8>| {
        bytes.clear();
        String::from_utf8(bytes).unwrap_or_default()
    };
    let wipe = |mut bytes: Vec<u8>| {
        bytes.fill(0);
        bytes.clear();
        if bytes.capacity() > SCRATCH_KEEP {
            Vec::new()
        } else {
            bytes
        }
    };
    SEAL_SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut bufs) => {
            let [body, inner, sealed] = &mut *bufs;
            let mut body_text = as_string(std::mem::take(body));
            let mut inner_text = as_string(std::mem::take(inner));
            let out = work(&mut body_text, &mut inner_text, sealed);
            *body = wipe(body_text.into_bytes());
            *inner = wipe(inner_text.into_bytes());
            *sealed = wipe(std::mem::take(sealed));
            out
        }
        // Re-entered (cannot happen today): fresh buffers, wiped on drop.
        Err(_) => {
            let (mut body, mut inner) =
                (Zeroizing::new(String::new()), Zeroizing::new(String::new()));
            let mut sealed = Zeroizing::new(Vec::new());
            work(&mut body, &mut inner, &mut sealed)
        }
    })
}
