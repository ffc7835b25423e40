//! BLAKE3 of a whole file computed from chunks hashed independently, possibly by different
//! threads: each chunk yields a chaining value, merged along the BLAKE3 tree, so the result equals
//! `b3sum` of the file. Chunk sizes are powers of two of at least 1 KiB, which keeps every chunk a
//! complete BLAKE3 subtree.

use blake3::hazmat::{self, ChainingValue, HasherExt, Mode};

/// The hash contribution of one chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The file fits in one chunk: this is already the root hash.
    Root([u8; 32]),
    /// A chaining value of one chunk of a multi-chunk file.
    Cv(ChainingValue),
}

/// Hash one chunk at `offset` of a file of `file_size` bytes.
pub fn hash_chunk(data: &[u8], offset: u64, file_size: u64) -> Part {
    if offset == 0 && data.len() as u64 == file_size {
        return Part::Root(*blake3::hash(data).as_bytes());
    }
    let mut h = blake3::Hasher::new();
    h.set_input_offset(offset);
    h.update(data);
    Part::Cv(h.finalize_non_root())
}

/// Merge the chunk parts of a file, in order, into its BLAKE3 hash. `chunk_size` must be the
/// power of two the chunks were cut at. Returns None if the parts do not fit the size.
pub fn merge(parts: &[Part], chunk_size: u64, file_size: u64) -> Option<[u8; 32]> {
    match parts {
        [Part::Root(h)] => Some(*h),
        [] => (file_size == 0).then(|| *blake3::hash(b"").as_bytes()),
        _ => {
            let cvs: Vec<ChainingValue> =
                parts.iter().map(|p| if let Part::Cv(cv) = p { Some(*cv) } else { None }).collect::<Option<_>>()?;
            if (cvs.len() as u64) != file_size.div_ceil(chunk_size) {
                return None;
            }
            let (l, r) = split(&cvs, chunk_size, file_size);
            Some(*hazmat::merge_subtrees_root(&l, &r, Mode::Hash).as_bytes())
        }
    }
}

/// Split `cvs` (covering `len` bytes) at the BLAKE3 left-subtree boundary and reduce each side.
fn split(cvs: &[ChainingValue], chunk_size: u64, len: u64) -> (ChainingValue, ChainingValue) {
    let left_len = hazmat::left_subtree_len(len);
    let n_left = (left_len / chunk_size) as usize;
    (reduce(&cvs[..n_left], chunk_size, left_len), reduce(&cvs[n_left..], chunk_size, len - left_len))
}

fn reduce(cvs: &[ChainingValue], chunk_size: u64, len: u64) -> ChainingValue {
    if cvs.len() == 1 {
        return cvs[0];
    }
    let (l, r) = split(cvs, chunk_size, len);
    hazmat::merge_subtrees_non_root(&l, &r, Mode::Hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by_chunks(data: &[u8], cs: usize) -> [u8; 32] {
        let parts: Vec<Part> = if data.is_empty() {
            vec![]
        } else {
            data.chunks(cs).enumerate().map(|(i, c)| hash_chunk(c, (i * cs) as u64, data.len() as u64)).collect()
        };
        merge(&parts, cs as u64, data.len() as u64).unwrap()
    }

    #[test]
    fn chunked_hash_equals_blake3_of_the_whole_file() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        for cs in [1024usize, 4096, 65536] {
            for len in [0, 1, 1023, 1024, 1025, cs - 1, cs, cs + 1, 3 * cs, 3 * cs + 7, 5 * cs, 7 * cs + 1, 300_000] {
                let len = len.min(data.len());
                assert_eq!(by_chunks(&data[..len], cs), *blake3::hash(&data[..len]).as_bytes(), "cs {cs} len {len}");
            }
        }
    }

    #[test]
    fn merge_refuses_missing_parts() {
        let data = vec![7u8; 4096 * 3];
        let mut parts: Vec<Part> =
            data.chunks(4096).enumerate().map(|(i, c)| hash_chunk(c, i as u64 * 4096, data.len() as u64)).collect();
        parts.pop();
        assert_eq!(merge(&parts, 4096, data.len() as u64), None);
    }
}
