//! Bounded decompression of ELF sections (zlib, zstd, `.zdebug`) and MiniDebugInfo (xz).
//!
//! The sizes a compressed section declares are the file author's: a section may declare far
//! more than it holds (an allocation sized from the header), and zstd output is not tied to
//! the declared size at all (a 66 KB bomb expands to gigabytes). Every decompression here is
//! therefore capped by [`cap_for`]: at most [`MAX_RATIO`] times the compressed bytes (real
//! DWARF compresses 3 to 10 times) and at most an absolute limit; a declared size over the
//! cap is refused before anything is allocated, and the output is streamed and stopped at the
//! cap (and at the declared size), never trusted.

use std::io::Read;

use object::{CompressedData, CompressionFormat};

/// Most a section may expand, relative to its compressed size.
pub const MAX_RATIO: u64 = 64;
/// Below this, a section may expand freely up to it (tiny sections compress very well).
pub const MIN_CAP: u64 = 1 << 20;
/// Most bytes one decompressed DWARF section may hold, whatever its compressed size.
pub const MAX_SECTION_BYTES: u64 = 1 << 30;
/// Most bytes decompressed MiniDebugInfo (`.gnu_debugdata`) may hold.
pub const MAX_MINI_DEBUG_INFO: u64 = 256 << 20;

/// Why a compressed section was not used.
#[derive(Debug, thiserror::Error)]
pub enum DecompressError {
    /// The header declares more than the cap allows for this input.
    #[error("declares {declared} bytes decompressed, over the cap of {cap} for {compressed} compressed bytes")]
    DeclaredTooLarge {
        /// The size the compression header declares.
        declared: u64,
        /// The cap for this input.
        cap: u64,
        /// The compressed bytes.
        compressed: u64,
    },
    /// The data expands past the cap (or past its declared size).
    #[error("expands past {limit} bytes ({what})")]
    TooLarge {
        /// The limit hit.
        limit: u64,
        /// Which limit: the cap or the declared size.
        what: &'static str,
    },
    /// The data expands to less than declared.
    #[error("expands to {actual} bytes, not the {declared} declared")]
    SizeMismatch {
        /// The declared size.
        declared: u64,
        /// What it expanded to.
        actual: u64,
    },
    /// The compressed stream is corrupt, or of an unsupported format.
    #[error("corrupt or unsupported compressed data: {0}")]
    Corrupt(String),
}

/// The most `compressed` bytes may expand to: [`MAX_RATIO`] times them, at least
/// [`MIN_CAP`], at most `absolute`.
pub fn cap_for(compressed: u64, absolute: u64) -> u64 {
    compressed
        .saturating_mul(MAX_RATIO)
        .max(MIN_CAP)
        .min(absolute)
}

/// A `Read` adaptor failing once more than `limit` bytes have come through.
struct Limited<R> {
    inner: R,
    left: u64,
    exceeded: bool,
}

impl<R: Read> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // Ask for one byte more than allowed, to tell "exactly the limit" from "over it".
        let want = (buf.len() as u64).min(self.left.saturating_add(1)) as usize;
        let n = self.inner.read(&mut buf[..want])?;
        if n as u64 > self.left {
            self.exceeded = true;
            return Err(std::io::Error::other("decompressed data over its limit"));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// Read all of `reader` into `out`, failing past `limit` bytes.
fn read_bounded(reader: impl Read, limit: u64, out: &mut Vec<u8>) -> Result<bool, String> {
    let mut limited = Limited {
        inner: reader,
        left: limit.saturating_sub(out.len() as u64),
        exceeded: false,
    };
    match limited.read_to_end(out) {
        Ok(_) => Ok(false),
        Err(_) if limited.exceeded => Ok(true),
        Err(err) => Err(err.to_string()),
    }
}

/// Decompress a section, capped by [`cap_for`] of its compressed size and `absolute`; the
/// output must be exactly the declared size.
pub fn section(c: &CompressedData<'_>, absolute: u64) -> Result<Vec<u8>, DecompressError> {
    let compressed = c.data.len() as u64;
    let cap = cap_for(compressed, absolute);
    let declared = c.uncompressed_size;
    if declared > cap {
        return Err(DecompressError::DeclaredTooLarge {
            declared,
            cap,
            compressed,
        });
    }
    // `declared <= cap`, and the cap fits in memory terms (at most `absolute`).
    let mut out = Vec::with_capacity(declared as usize);
    let over = match c.format {
        CompressionFormat::None => {
            out.extend_from_slice(c.data);
            false
        }
        CompressionFormat::Zlib => {
            read_bounded(flate2::read::ZlibDecoder::new(c.data), declared, &mut out)
                .map_err(DecompressError::Corrupt)?
        }
        CompressionFormat::Zstandard => zstd(c.data, declared, &mut out)?,
        other => return Err(DecompressError::Corrupt(format!("format {other:?}"))),
    };
    if over {
        return Err(DecompressError::TooLarge {
            limit: declared,
            what: "the declared size",
        });
    }
    if out.len() as u64 != declared {
        return Err(DecompressError::SizeMismatch {
            declared,
            actual: out.len() as u64,
        });
    }
    Ok(out)
}

/// Every zstd frame of `input` (skippable frames skipped) into `out`, failing past `limit`.
fn zstd(mut input: &[u8], limit: u64, out: &mut Vec<u8>) -> Result<bool, DecompressError> {
    while !input.is_empty() {
        let decoder = match ruzstd::StreamingDecoder::new(&mut input) {
            Ok(d) => d,
            Err(ruzstd::frame_decoder::FrameDecoderError::ReadFrameHeaderError(
                ruzstd::frame::ReadFrameHeaderError::SkipFrame { length, .. },
            )) => {
                input = input
                    .get(length as usize..)
                    .ok_or_else(|| DecompressError::Corrupt("truncated skippable frame".into()))?;
                continue;
            }
            Err(err) => return Err(DecompressError::Corrupt(err.to_string())),
        };
        if read_bounded(decoder, limit, out).map_err(DecompressError::Corrupt)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Decompress xz data (MiniDebugInfo), at most [`cap_for`] its size and
/// [`MAX_MINI_DEBUG_INFO`].
pub fn xz(data: &[u8]) -> Result<Vec<u8>, DecompressError> {
    struct Bounded {
        out: Vec<u8>,
        cap: u64,
        over: bool,
    }
    impl std::io::Write for Bounded {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if (self.out.len() as u64).saturating_add(buf.len() as u64) > self.cap {
                self.over = true;
                return Err(std::io::Error::other("MiniDebugInfo over its cap"));
            }
            self.out.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let cap = cap_for(data.len() as u64, MAX_MINI_DEBUG_INFO);
    let mut out = Bounded {
        out: Vec::new(),
        cap,
        over: false,
    };
    let mut input = data;
    match lzma_rs::xz_decompress(&mut input, &mut out) {
        Ok(()) => Ok(out.out),
        Err(_) if out.over => Err(DecompressError::TooLarge {
            limit: cap,
            what: "the cap",
        }),
        Err(err) => Err(DecompressError::Corrupt(err.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn compressed(format: CompressionFormat, data: &[u8], size: u64) -> CompressedData<'_> {
        CompressedData {
            format,
            data,
            uncompressed_size: size,
        }
    }

    #[test]
    fn caps() {
        assert_eq!(cap_for(10, MAX_SECTION_BYTES), MIN_CAP);
        assert_eq!(cap_for(1 << 20, MAX_SECTION_BYTES), 64 << 20);
        assert_eq!(cap_for(u64::MAX, MAX_SECTION_BYTES), MAX_SECTION_BYTES);
    }

    #[test]
    fn zlib_declared_and_actual_sizes_are_bounded() {
        let data = vec![7u8; 100_000];
        let z = zlib(&data);
        let ok = section(
            &compressed(CompressionFormat::Zlib, &z, 100_000),
            MAX_SECTION_BYTES,
        );
        assert_eq!(ok.unwrap(), data);
        // A huge declared size is refused before any allocation.
        let err = section(
            &compressed(CompressionFormat::Zlib, &z, 1 << 54),
            MAX_SECTION_BYTES,
        );
        assert!(
            matches!(err, Err(DecompressError::DeclaredTooLarge { .. })),
            "{err:?}"
        );
        // Declaring less than it holds stops at the declared size.
        let err = section(
            &compressed(CompressionFormat::Zlib, &z, 1000),
            MAX_SECTION_BYTES,
        );
        assert!(
            matches!(err, Err(DecompressError::TooLarge { .. })),
            "{err:?}"
        );
        // Declaring more than it holds is a mismatch.
        let err = section(
            &compressed(CompressionFormat::Zlib, &z, 100_001),
            MAX_SECTION_BYTES,
        );
        assert!(
            matches!(err, Err(DecompressError::SizeMismatch { .. })),
            "{err:?}"
        );
        // A bomb (10 MB of zeros in ~10 KB) over the ratio cap is refused.
        let bomb = zlib(&vec![0u8; 10 << 20]);
        assert!(bomb.len() < 16 << 10);
        let err = section(
            &compressed(CompressionFormat::Zlib, &bomb, 10 << 20),
            MAX_SECTION_BYTES,
        );
        assert!(
            matches!(err, Err(DecompressError::DeclaredTooLarge { .. })),
            "{err:?}"
        );
        // Garbage is an error.
        let err = section(
            &compressed(CompressionFormat::Zlib, b"garbage", 10),
            MAX_SECTION_BYTES,
        );
        assert!(matches!(err, Err(DecompressError::Corrupt(_))), "{err:?}");
    }

    #[test]
    fn xz_is_capped() {
        assert!(matches!(xz(b"not xz"), Err(DecompressError::Corrupt(_))));
    }
}
