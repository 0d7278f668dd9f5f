//! Turning one sample into a typed [`Stack`]: the kernel's callchain split into its kernel and
//! user parts, the user part unwound with DWARF from the copied stack (when stacks are copied)
//! and spliced with the kernel's frame-pointer chain where the copy runs out.
//!
//! This is the only place where return addresses become call sites (see [`profile::Stack`]).

use procmap::ProcessTable;
use profile::{call_site, Stack, StackEnd};
use sampler::{context, Sample};

use crate::process::{Unwinders, MAX_FRAMES};
use crate::splice::splice;

/// Builds the stack of each sample; owns the per-process unwinders and scratch space, so that
/// a sample costs no allocation once the scratch has grown.
pub struct StackBuilder {
    /// Present when user stacks are unwound with DWARF.
    unwinders: Option<Unwinders>,
    /// Continue from the frame-pointer chain where the copy runs out.
    splice: bool,
    kernel: Vec<u64>,
    user: Vec<u64>,
    fp_user: Vec<u64>,
    /// How far into its stack copy the last sample's unwind read (bytes).
    stack_reach: usize,
}

impl StackBuilder {
    /// Stacks as the kernel walked them (frame pointers).
    pub fn frame_pointers() -> StackBuilder {
        StackBuilder::new(None, false)
    }

    /// User stacks unwound with `unwinders` from the copied stack; with `splice`, continued
    /// from the kernel's frame-pointer chain where the copy runs out.
    pub fn dwarf(unwinders: Unwinders, splice: bool) -> StackBuilder {
        StackBuilder::new(Some(unwinders), splice)
    }

    fn new(unwinders: Option<Unwinders>, splice: bool) -> StackBuilder {
        StackBuilder {
            unwinders,
            splice,
            kernel: Vec::with_capacity(256),
            user: Vec::with_capacity(MAX_FRAMES),
            fp_user: Vec::with_capacity(256),
            stack_reach: 0,
        }
    }

    /// The DWARF unwinders, when user stacks are unwound.
    pub fn unwinders(&self) -> Option<&Unwinders> {
        self.unwinders.as_ref()
    }

    /// The DWARF unwinders, when user stacks are unwound (they follow the process model).
    pub fn unwinders_mut(&mut self) -> Option<&mut Unwinders> {
        self.unwinders.as_mut()
    }

    /// How far into its copied stack the last [`StackBuilder::build`] read, in bytes from the
    /// copy's start (0 when it unwound none).
    pub fn last_stack_reach(&self) -> usize {
        self.stack_reach
    }

    /// The stack of sample `s`, whose process's mappings are in `table`.
    pub fn build(&mut self, table: &ProcessTable, s: &Sample<'_>) -> Stack<'_> {
        self.stack_reach = 0;
        self.kernel.clear();
        self.user.clear();
        self.fp_user.clear();
        if s.callchain.is_empty() {
            // No callchain (not asked for, or the kernel gave none): the sampled instruction.
            if s.in_kernel {
                self.kernel.push(s.ip);
            } else {
                self.fp_user.push(s.ip);
            }
        } else {
            let mut part = None;
            for entry in s.callchain.iter() {
                match entry {
                    context::KERNEL => part = Some(&mut self.kernel),
                    context::USER => part = Some(&mut self.fp_user),
                    // Guest or hypervisor frames: not ours to name.
                    e if context::is_marker(e) => break,
                    e => {
                        if let Some(part) = part.as_mut() {
                            part.push(e);
                        }
                    }
                }
            }
        }
        // Every entry but the innermost of the whole stack is a return address.
        for entry in self.kernel.iter_mut().skip(1) {
            *entry = call_site(*entry);
        }
        let user_starts_with_return = !self.kernel.is_empty();
        let skip = usize::from(!user_starts_with_return);
        for entry in self.fp_user.iter_mut().skip(skip) {
            *entry = call_site(*entry);
        }
        let user_end = match (self.unwinders.as_mut(), s.user_regs.as_ref()) {
            (Some(unwinders), Some(regs)) => {
                let mut end =
                    unwinders.unwind(table, s.pid, s.time, regs, s.user_stack, &mut self.user);
                self.stack_reach = unwinders.stack_reach();
                if user_starts_with_return {
                    // The user registers of a sample taken in the kernel point after the
                    // instruction that entered it (a system call).
                    if let Some(first) = self.user.first_mut() {
                        *first = call_site(*first);
                    }
                }
                if end == StackEnd::Truncated
                    && self.splice
                    && splice(&mut self.user, &self.fp_user)
                {
                    end = StackEnd::Spliced;
                }
                end
            }
            // Frame-pointer mode, or no user context (a kernel thread): the kernel's chain.
            _ => {
                std::mem::swap(&mut self.user, &mut self.fp_user);
                if self.user.is_empty() {
                    StackEnd::NoUserStack
                } else {
                    StackEnd::FramePointer
                }
            }
        };
        Stack {
            kernel: &self.kernel,
            user: &self.user,
            user_end,
        }
    }
}
