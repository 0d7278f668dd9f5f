//! Reading a profile back, gzipped or not, within a size bound.

use std::io::Read;

use crate::proto::Profile;
use crate::PprofError;

/// Largest profile read, decompressed (and uncompressed input alike): 256 MiB. A pprof file
/// can come from anyone; a small gzip bomb must not cost gigabytes.
pub const MAX_DECOMPRESSED_BYTES: u64 = 256 << 20;

/// Decode a pprof profile: gzipped (as files and `/debug/pprof/profile` are) or raw protobuf.
/// More than [`MAX_DECOMPRESSED_BYTES`] of protobuf is refused with [`PprofError::TooLarge`];
/// corrupt gzip and bytes that are not a `Profile` message are errors. The references inside
/// are not checked here ([`crate::fold`] checks the ones it follows).
pub fn decode(bytes: &[u8]) -> Result<Profile, PprofError> {
    decode_with_limit(bytes, MAX_DECOMPRESSED_BYTES)
}

/// [`decode`] with another bound.
pub(crate) fn decode_with_limit(bytes: &[u8], limit: u64) -> Result<Profile, PprofError> {
    if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut raw = Vec::new();
        flate2::read::MultiGzDecoder::new(bytes)
            .take(limit + 1)
            .read_to_end(&mut raw)
            .map_err(PprofError::Gzip)?;
        if raw.len() as u64 > limit {
            return Err(PprofError::TooLarge { limit });
        }
        Ok(<Profile as prost::Message>::decode(raw.as_slice())?)
    } else {
        if bytes.len() as u64 > limit {
            return Err(PprofError::TooLarge { limit });
        }
        Ok(<Profile as prost::Message>::decode(bytes)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(data).unwrap();
        gz.finish().unwrap()
    }

    #[test]
    fn a_bomb_is_refused_by_size() {
        let bomb = gzip(&vec![0u8; 2 << 20]);
        // Small on disk (whichever deflate backend the build picked), large inflated.
        assert!(bomb.len() < 64 << 10, "{} bytes", bomb.len());
        let err = decode_with_limit(&bomb, 1 << 20).unwrap_err();
        assert!(matches!(err, PprofError::TooLarge { .. }), "{err}");
        assert!(err.to_string().contains("larger than 1 MiB"), "{err}");
    }

    #[test]
    fn corrupt_inputs_are_errors() {
        let p = crate::Builder::new(1).finish();
        let gz = crate::encode_gz(&p);
        assert!(matches!(
            decode(&gz[..gz.len() - 3]),
            Err(PprofError::Gzip(_))
        ));
        assert!(matches!(
            decode(b"\x0a\xff\xff"),
            Err(PprofError::Protobuf(_))
        ));
        assert_eq!(decode(&crate::encode(&p)).unwrap(), p);
        assert_eq!(decode(&gz).unwrap(), p);
    }
}
