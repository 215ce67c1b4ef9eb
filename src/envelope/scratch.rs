//! Per-thread reusable buffers for seal and open, zeroed after each use.

use zeroize::Zeroizing;

/// Scratch buffers above this capacity are released after use instead of kept.
const SCRATCH_KEEP: usize = 4 << 20;

use std::cell::RefCell;
use std::thread::LocalKey;

thread_local! {
    static OPEN_SCRATCH: RefCell<[Vec<u8>; 2]> = const { RefCell::new([Vec::new(), Vec::new()]) };
    static SEAL_SCRATCH: RefCell<[Vec<u8>; 3]> = const { RefCell::new([Vec::new(), Vec::new(), Vec::new()]) };
}

/// Run `work` with two reusable byte buffers (decoded ciphertext, decoded
/// body), so opening large envelopes does not map and fault in fresh memory
/// every time.
pub(super) fn with_scratch<T>(work: impl FnOnce(&mut Vec<u8>, &mut Vec<u8>) -> T) -> T {
    with_buffers(&OPEN_SCRATCH, |[a, b]| work(a, b))
}

/// Run a seal's `work` with three reusable buffers (signed body, inner
/// JSON, sealed box), for the same reason as [`with_scratch`]: a large
/// payload's seal otherwise maps and faults in a few fresh megabytes each
/// time (a 1M-character seal spent more in page faults than in copies).
/// The strings are handed out empty.
pub(super) fn with_seal_scratch<T>(
    work: impl FnOnce(&mut String, &mut String, &mut Vec<u8>) -> T,
) -> T {
    // An empty byte vector is always valid UTF-8: the string keeps its capacity.
    let as_string = |mut bytes: Vec<u8>| {
        bytes.clear();
        String::from_utf8(bytes).unwrap_or_default()
    };
    with_buffers(&SEAL_SCRATCH, |[body, inner, sealed]| {
        let mut body_text = as_string(std::mem::take(body));
        let mut inner_text = as_string(std::mem::take(inner));
        let out = work(&mut body_text, &mut inner_text, sealed);
        *body = body_text.into_bytes();
        *inner = inner_text.into_bytes();
        out
    })
}

/// `work` with this thread's buffers in `slot`. They hold decrypted data
/// and plaintexts, so afterwards the used part is zeroed (a plain memset:
/// the buffers stay alive, so it is not a dead store the compiler could
/// drop; `zeroize`'s byte-wise volatile writes cost more than the rest of a
/// megabyte open), and oversized ones are released.
fn with_buffers<const N: usize, T>(
    slot: &'static LocalKey<RefCell<[Vec<u8>; N]>>,
    work: impl FnOnce(&mut [Vec<u8>; N]) -> T,
) -> T {
    slot.with(|cell| match cell.try_borrow_mut() {
        Ok(mut bufs) => {
            let out = work(&mut bufs);
            for buf in bufs.iter_mut() {
                buf.fill(0);
                buf.clear();
                if buf.capacity() > SCRATCH_KEEP {
                    *buf = Vec::new();
                }
            }
            out
        }
        // Re-entered (no caller does): fresh buffers, wiped on drop.
        Err(_) => work(&mut Zeroizing::new(std::array::from_fn(|_| Vec::new()))),
    })
}
