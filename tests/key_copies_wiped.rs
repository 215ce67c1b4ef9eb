//! Copies of private keys made while reading or writing a site's keys are
//! wiped before their memory is freed. This test binary's allocator reads
//! every heap block as it is freed (reallocations included) while a check is
//! on, and counts the blocks that still hold a private key's text.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use byollm_server_native::b64;
use byollm_server_native::keys::StoredKeys;
use byollm_server_native::site_keys::{format_site_keys, site_keys_from_env, SiteKeysError};

struct Watching;

static ON: AtomicBool = AtomicBool::new(false);
static FOUND: AtomicUsize = AtomicUsize::new(0);
/// The texts looked for (set before a check is turned on, never freed).
static NEEDLES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
/// One check at a time (the allocator's flag is global).
static CHECK: Mutex<()> = Mutex::new(());

fn holds(block: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && block.windows(needle.len()).any(|w| w == needle)
}

// SAFETY: every call is forwarded to the system allocator; the freed block
// is only read (its `layout.size()` bytes, which it owns) before that.
unsafe impl GlobalAlloc for Watching {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if ON.load(Ordering::SeqCst) {
            if let Some(needles) = NEEDLES.get() {
                // SAFETY: `ptr` is a live block of `layout.size()` bytes until
                // it is handed back below.
                let block = unsafe { std::slice::from_raw_parts(ptr, layout.size()) };
                if needles.iter().any(|n| holds(block, n)) {
                    FOUND.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Watching = Watching;

/// How many freed blocks still held a private key while `work` ran.
fn unwiped_while(work: impl FnOnce()) -> usize {
    let _one = CHECK.lock().unwrap_or_else(|e| e.into_inner());
    FOUND.store(0, Ordering::SeqCst);
    ON.store(true, Ordering::SeqCst);
    work();
    ON.store(false, Ordering::SeqCst);
    FOUND.load(Ordering::SeqCst)
}

fn keys() -> StoredKeys {
    StoredKeys::from_secrets(&[7; 32], &[9; 32], 1_767_225_600_000)
}

/// The private keys' texts, and the start of the env value that carries
/// them (base64 of the keys' JSON: a partial copy of it holds that start).
fn needles(keys: &StoredKeys) {
    let encoded = b64::encode_std(keys.to_json().as_bytes());
    let _ = NEEDLES.set(vec![
        keys.identity_private.as_bytes().to_vec(),
        keys.encryption_private.as_bytes().to_vec(),
        encoded.as_bytes().get(..96).unwrap_or_default().to_vec(),
    ]);
}

#[test]
fn copies_of_private_keys_are_wiped_before_they_are_freed() {
    let keys = keys();
    needles(&keys);

    // The detector sees a copy that is not wiped.
    let plain = keys.identity_private.to_string();
    assert!(unwiped_while(|| drop(plain)) >= 1);

    // keygen's text: the answer holds the secret (base64 of the JSON), and
    // nothing on the way to it is left behind.
    let mut formatted = None;
    assert_eq!(
        unwiped_while(|| formatted = Some(format_site_keys(&keys))),
        0
    );
    let formatted = formatted.unwrap_or_default();
    let line = formatted
        .lines()
        .find_map(|l| l.strip_prefix("BYOLLM_SITE_KEYS="))
        .unwrap_or_default()
        .to_owned();

    // Read back, and the keys then dropped (they wipe themselves).
    assert_eq!(
        unwiped_while(|| {
            let read = site_keys_from_env("BYOLLM_SITE_KEYS", Some(&line));
            assert_eq!(read.as_ref().ok(), Some(&keys));
            drop(read);
        }),
        0
    );

    // A value whose JSON breaks after the private keys: the strings parsed
    // before the error are wiped too.
    let json = keys.to_json();
    let broken = format!("{},", json.trim_end_matches('}'));
    let broken_line = b64::encode_std(broken.as_bytes());
    drop(broken);
    assert_eq!(
        unwiped_while(|| {
            let read = site_keys_from_env("V", Some(&broken_line));
            assert!(matches!(read, Err(SiteKeysError::NotBase64Json(_))));
        }),
        0
    );

    // Not UTF-8 (a stray byte inside a string): the lossy text is wiped too,
    // and so is the document that failed the schema.
    let mut bytes = json.clone().into_bytes();
    let at = json.find("\"createdAt\"").unwrap_or(0);
    bytes.splice(at..at, *b"\"x\":\"\xff\",");
    let odd_line = b64::encode_std(&bytes);
    drop(bytes);
    drop(json);
    assert_eq!(
        unwiped_while(|| {
            let read = site_keys_from_env("V", Some(&odd_line));
            assert!(matches!(read, Err(SiteKeysError::NotSiteIdentity(_))));
        }),
        0
    );
}
