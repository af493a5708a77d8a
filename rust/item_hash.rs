//! The public seeded item hash of the heavy-hitter protocols (version 1), for many items at
//! once.
//!
//! An item's message is a tag byte (`0x01` bytes, `0x02` str as UTF-8, `0x03` unsigned
//! 64-bit integer as 8 little-endian bytes) followed by its payload; its 64-bit hash is
//! keyed BLAKE2b (RFC 7693) of the message with an 8-byte digest, the 32-byte key
//! `seed.to_bytes(32, "little")` and the personalization `b"ldpdist.hh.v1"` (zero-padded
//! to 16 bytes), the digest read big-endian. [`hash_messages`] hashes concatenated
//! messages; building the messages from items (and refusing what is not an item) is the
//! caller's part. Every message is hashed on its own, so the result does not depend on the
//! number of threads.

use crate::error::{Error, Result};
use crate::interrupt;
use blake2::digest::consts::U8;
use blake2::digest::{FixedOutput, Update};
use blake2::Blake2bMac;
use rayon::prelude::*;

/// BLAKE2b personalization of version 1 of the hash.
pub const PERSONALIZATION: &[u8] = b"ldpdist.hh.v1";
/// Length of the hash key (the seed's 32 little-endian bytes).
pub const KEY_BYTES: usize = 32;
/// Messages per parallel task.
const CHUNK: usize = 1 << 11;
/// Cost of one message in bytes hashed: the key block is one 128-byte block.
const BLOCK_BYTES: usize = 128;

type Hasher = Blake2bMac<U8>;

/// The keyed, personalized state before any message byte (cloned per message).
fn keyed(key: &[u8]) -> Result<Hasher> {
    if key.len() != KEY_BYTES {
        return Err(Error::Value(format!(
            "the hash key is {KEY_BYTES} bytes (the seed's little-endian bytes), got {}",
            key.len()
        )));
    }
    Hasher::new_with_salt_and_personal(Some(key), &[], PERSONALIZATION)
        .map_err(|_| Error::Value("invalid BLAKE2b key or personalization length".into()))
}

fn digest(state: &Hasher, message: &[u8]) -> u64 {
    let mut h = state.clone();
    h.update(message);
    u64::from_be_bytes(h.finalize_fixed().into())
}

/// The 64-bit hash of one message (tag byte and payload) under a 32-byte `key`.
pub fn hash_message(message: &[u8], key: &[u8]) -> Result<u64> {
    Ok(digest(&keyed(key)?, message))
}

/// The 64-bit hashes of `offsets.len() - 1` messages: message `i` is
/// `messages[offsets[i]..offsets[i + 1]]` (offsets non-decreasing, the last at most
/// `messages.len()`); `key` is the 32-byte hash key.
///
/// Runs on rayon's pool when the work is large; checks for interruption between chunks.
pub fn hash_messages(messages: &[u8], offsets: &[u64], key: &[u8]) -> Result<Vec<u64>> {
    let state = keyed(key)?;
    let Some((&last, _)) = offsets.split_last() else {
        return Err(Error::Value(
            "offsets must hold n + 1 entries for n messages, got none".into(),
        ));
    };
    if let Some(i) = offsets.windows(2).position(|w| w[1] < w[0]) {
        return Err(Error::Value(format!(
            "offsets must be non-decreasing: offsets[{}] = {} > offsets[{}] = {}",
            i,
            offsets[i],
            i + 1,
            offsets[i + 1]
        )));
    }
    if last > messages.len() as u64 {
        return Err(Error::Value(format!(
            "the last offset {last} is beyond the {} bytes of messages",
            messages.len()
        )));
    }
    let n = offsets.len() - 1;
    crate::memory::Footprint::new("item hashing")
        .add("the hashes", n as u128, 8)
        .add(
            "the primed hash states",
            256u128,
            std::mem::size_of::<Option<Hasher>>(),
        )
        .check()?;
    let mut out = crate::memory::allocate_zeroed::<u64>(n, "the hashes")?;
    // The key fills BLAKE2b's first block, compressed once the message's first byte arrives:
    // the states that have absorbed the key block and one first byte (in practice the three
    // tags) are computed once, so a short message costs one compression instead of two.
    let mut primed: Vec<Option<Hasher>> = vec![None; 256];
    for w in offsets.windows(2) {
        if w[1] > w[0] {
            let first = messages[w[0] as usize];
            primed[first as usize].get_or_insert_with(|| {
                let mut h = state.clone();
                h.update(&[first]);
                h
            });
        }
    }
    let one = |(c, chunk): (usize, &mut [u64])| -> Result<()> {
        interrupt::check()?;
        let start = c * CHUNK;
        for (j, h) in chunk.iter_mut().enumerate() {
            let (a, b) = (offsets[start + j] as usize, offsets[start + j + 1] as usize);
            *h = match messages[a..b].split_first() {
                Some((&first, rest)) => digest(primed[first as usize].as_ref().unwrap(), rest),
                None => digest(&state, &[]),
            };
        }
        Ok(())
    };
    let work = n
        .saturating_mul(BLOCK_BYTES)
        .saturating_add((last - offsets[0]) as usize);
    if work < crate::parallel::PARALLEL_WORK || n <= CHUNK {
        out.chunks_mut(CHUNK).enumerate().try_for_each(one)?;
    } else {
        out.par_chunks_mut(CHUNK).enumerate().try_for_each(one)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published vectors (tests/data/heavy_hitters_hash_v1.json), read without a JSON
    /// dependency: each vector's key (from its decimal seed), message and h64.
    fn vectors() -> Vec<([u8; 32], Vec<u8>, u64)> {
        let text = include_str!("../tests/data/heavy_hitters_hash_v1.json");
        let field = |obj: &str, name: &str| -> String {
            let at = obj.find(&format!("\"{name}\": \"")).expect(name) + name.len() + 5;
            obj[at..at + obj[at..].find('"').unwrap()].to_string()
        };
        let hex = |h: &str| -> Vec<u8> {
            (0..h.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
                .collect()
        };
        let mut out = Vec::new();
        for obj in text.split("\"seed\"").skip(1) {
            let obj = format!("\"seed\"{obj}");
            // the seed in decimal (up to 2^256 - 1) to 32 little-endian bytes
            let mut key = [0u8; 32];
            for digit in field(&obj, "seed").bytes() {
                let mut carry = (digit - b'0') as u32;
                for byte in key.iter_mut() {
                    let v = *byte as u32 * 10 + carry;
                    *byte = v as u8;
                    carry = v >> 8;
                }
                assert_eq!(carry, 0);
            }
            let h64 = u64::from_be_bytes(hex(&field(&obj, "h64_hex")).try_into().unwrap());
            out.push((key, hex(&field(&obj, "message_hex")), h64));
        }
        out
    }

    #[test]
    fn matches_the_published_vectors() {
        let vectors = vectors();
        assert_eq!(vectors.len(), 36);
        for (key, message, h64) in &vectors {
            assert_eq!(hash_message(message, key).unwrap(), *h64);
        }
        // all of them in one call per key, in a buffer with a gap before the first message
        for (key, _, _) in &vectors {
            let chosen: Vec<_> = vectors.iter().filter(|v| v.0 == *key).collect();
            let mut buffer = vec![0xAAu8; 3];
            let mut offsets = vec![3u64];
            for (_, m, _) in &chosen {
                buffer.extend_from_slice(m);
                offsets.push(buffer.len() as u64);
            }
            let got = hash_messages(&buffer, &offsets, key).unwrap();
            let want: Vec<u64> = chosen.iter().map(|v| v.2).collect();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn independent_of_threads_and_chunking() {
        let key = [7u8; 32];
        let n = 3 * CHUNK + 17;
        let mut buffer = Vec::new();
        let mut offsets = vec![0u64];
        for i in 0..n {
            let len = (i * 37) % 300;
            buffer.extend((0..len).map(|j| (i + j) as u8));
            offsets.push(buffer.len() as u64);
        }
        let one = crate::parallel::in_pool(1, || hash_messages(&buffer, &offsets, &key).unwrap());
        let four = crate::parallel::in_pool(4, || hash_messages(&buffer, &offsets, &key).unwrap());
        assert_eq!(one, four);
        for i in [0, 1, CHUNK, n - 1] {
            let m = &buffer[offsets[i] as usize..offsets[i + 1] as usize];
            assert_eq!(one[i], hash_message(m, &key).unwrap());
        }
    }

    #[test]
    fn refuses_bad_inputs() {
        let key = [0u8; 32];
        assert!(hash_messages(b"ab", &[], &key).is_err());
        assert!(hash_messages(b"ab", &[0, 2, 1], &key).is_err());
        assert!(hash_messages(b"ab", &[0, 3], &key).is_err());
        assert!(hash_messages(b"ab", &[0, 2], &key[..31]).is_err());
        assert_eq!(hash_messages(b"", &[0], &key).unwrap(), Vec::<u64>::new());
    }
}
