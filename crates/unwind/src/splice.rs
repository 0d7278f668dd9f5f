//! Continuing a DWARF-unwound stack from the kernel's frame-pointer chain where the stack copy
//! ran out.

/// Append to `unwound` (leaf first) the part of `fp_chain` (leaf first, user addresses only)
/// beyond the outermost unwound return address. Returns whether the two chains met.
///
/// The chains meet at the first return address (outermost unwound first) that appears in the
/// frame-pointer chain; frames the frame-pointer walk skipped or invented below that point are
/// ignored in favour of the DWARF ones.
pub fn splice(unwound: &mut Vec<u64>, fp_chain: &[u64]) -> bool {
    for depth in (0..unwound.len()).rev() {
        let addr = unwound[depth];
        // In a recursion the same return address stands at many depths: take the occurrence
        // at the same depth in both chains (they agree frame for frame where frame pointers
        // are kept), or the nearest one.
        let at = fp_chain
            .iter()
            .enumerate()
            .filter(|&(_, &a)| a == addr)
            .min_by_key(|&(i, _)| i.abs_diff(depth))
            .map(|(i, _)| i);
        if let Some(at) = at {
            unwound.truncate(depth + 1);
            unwound.extend_from_slice(&fp_chain[at + 1..]);
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splices_at_the_outermost_common_return_address() {
        let mut unwound = vec![0x10, 0x20, 0x30];
        assert!(splice(&mut unwound, &[0x11, 0x20, 0x30, 0x40, 0x50]));
        assert_eq!(unwound, vec![0x10, 0x20, 0x30, 0x40, 0x50]);
    }

    #[test]
    fn fp_chain_that_skipped_a_frame_still_meets() {
        // The FP walk missed 0x20 (a leaf without a frame) but agrees from 0x30 on.
        let mut unwound = vec![0x10, 0x20, 0x30];
        assert!(splice(&mut unwound, &[0x10, 0x30, 0x40]));
        assert_eq!(unwound, vec![0x10, 0x20, 0x30, 0x40]);
    }

    #[test]
    fn recursion_splices_at_the_same_depth() {
        // leaf, then the recursive function's return address 5 times, then main's.
        let fp: Vec<u64> = [0x10]
            .into_iter()
            .chain([0x20; 5])
            .chain([0x30, 0x40])
            .collect();
        let mut unwound = vec![0x10, 0x20, 0x20, 0x20];
        assert!(splice(&mut unwound, &fp));
        assert_eq!(unwound, fp, "no recursion level lost or repeated");
    }

    #[test]
    fn chains_that_never_meet_are_left_alone() {
        let mut unwound = vec![0x10, 0x20];
        assert!(!splice(&mut unwound, &[0x99, 0x98]));
        assert_eq!(unwound, vec![0x10, 0x20]);
        // Only the sampled instruction was unwound: the FP chain starts there too.
        let mut leaf_only = vec![0x10];
        assert!(splice(&mut leaf_only, &[0x10, 0x20]));
        assert_eq!(leaf_only, vec![0x10, 0x20]);
    }
}
