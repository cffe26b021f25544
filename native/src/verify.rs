//! Ed25519 signatures verified in bulk, without the GIL, by the very libsodium
//! function the Python side verifies with one at a time.
//!
//! PyNaCl (which runledger's `events.signed.signing` verifies with) links libsodium
//! into its extension module, and its `VerifyKey.verify` calls `crypto_sign_open`
//! on the signature followed by the message. The caller hands over the address of
//! that module's `crypto_sign_open`, and this makes the same call on the same
//! bytes, so the bulk path and the one-at-a-time path cannot disagree on a signature. What this adds
//! is one call per batch: a thread verifying one signature at a time from Python has
//! to take the GIL back after each, which a busy reader thread holds for up to the
//! interpreter's switch interval (5 ms), so verifying threads beside a busy reader
//! barely ran.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

/// `int crypto_sign_open(unsigned char *m, unsigned long long *mlen_p, const unsigned
/// char *sm, unsigned long long smlen, const unsigned char *pk)`: 0 when `sm` (the
/// signature, then the message) is `pk`'s; the message is written to `m`.
type SignOpen = unsafe extern "C" fn(*mut u8, *mut u64, *const u8, u64, *const u8) -> i32;

const PUBLIC_KEY_BYTES: usize = 32;
const SIGNATURE_BYTES: usize = 64;

/// One thread's buffers: the signed message, and where libsodium writes the message back.
#[derive(Default)]
struct Buffers {
    signed: Vec<u8>,
    opened: Vec<u8>,
}

fn verify_one(f: SignOpen, buf: &mut Buffers, public: &[u8], message: &[u8],
              signature: &[u8]) -> bool {
    if public.len() != PUBLIC_KEY_BYTES || signature.len() != SIGNATURE_BYTES {
        return false;
    }
    buf.signed.clear();
    buf.signed.extend_from_slice(signature);
    buf.signed.extend_from_slice(message);
    buf.opened.resize(buf.signed.len(), 0); // as PyNaCl sizes it: the signed length
    let mut opened_len: u64 = 0;
    // SAFETY: `opened` holds at least `signed.len()` bytes (libsodium writes at most
    // `smlen - 64`), the key is 32 bytes, and `f` is libsodium's (see `verify_many`).
    unsafe {
        f(buf.opened.as_mut_ptr(), &mut opened_len, buf.signed.as_ptr(), buf.signed.len() as u64,
          public.as_ptr()) == 0
    }
}

fn bytes_of<'py>(list: &Bound<'py, PyList>, what: &str) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    list.iter()
        .map(|v| v.downcast_into::<PyBytes>())
        .collect::<Result<_, _>>()
        .map_err(|e| PyValueError::new_err(format!("each {what} must be bytes: {e}")))
}

/// Whether each `signatures[i]` is `publics[i]`'s over `messages[i]`, verified on
/// `threads` threads with the GIL released for the whole batch.
///
/// `function` is the address of libsodium's `crypto_sign_open` in a
/// library this process has loaded and initialized (`sodium_init`); the Python
/// caller takes it from PyNaCl's own module, and nothing else may be passed.
#[pyfunction]
pub fn verify_many(py: Python<'_>, function: usize, publics: &Bound<'_, PyList>,
                   messages: &Bound<'_, PyList>, signatures: &Bound<'_, PyList>,
                   threads: usize) -> PyResult<Vec<bool>> {
    if function == 0 {
        return Err(PyValueError::new_err("no verify function given"));
    }
    let n = publics.len();
    if messages.len() != n || signatures.len() != n {
        return Err(PyValueError::new_err(format!(
            "{n} keys, {} messages and {} signatures: one of each per signature",
            messages.len(), signatures.len())));
    }
    // SAFETY: the caller's contract above: the address of that very C function.
    let f: SignOpen = unsafe { std::mem::transmute::<usize, SignOpen>(function) };
    let (p, m, s) = (bytes_of(publics, "key")?, bytes_of(messages, "message")?,
                     bytes_of(signatures, "signature")?);
    let work: Vec<(&[u8], &[u8], &[u8])> = (0..n)
        .map(|i| (p[i].as_bytes(), m[i].as_bytes(), s[i].as_bytes()))
        .collect();
    let threads = threads.clamp(1, 64);
    Ok(py.allow_threads(|| {
        let size = n.div_ceil(threads).max(1);
        let mut out = vec![false; n];
        std::thread::scope(|scope| {
            for (chunk, results) in work.chunks(size).zip(out.chunks_mut(size)) {
                scope.spawn(move || {
                    let mut buf = Buffers::default();
                    for ((public, message, signature), ok) in chunk.iter().zip(results.iter_mut()) {
                        *ok = verify_one(f, &mut buf, public, message, signature);
                    }
                });
            }
        });
        out
    }))
}
