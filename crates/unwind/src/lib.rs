//! Unwinding sampled user stacks with DWARF call-frame information.
//!
//! Each sample brings the user registers and a copy of the top of the user stack; [`Unwinders`]
//! keeps one framehop unwinder per address space (modules added as the process maps code; a
//! forked child shares its parent's until either maps new code; unwind sections parsed once
//! per binary, on a loader thread of its own, and shared) and turns the
//! copy into return addresses. The thread that unwinds never waits for a file: a binary whose
//! sections are still being read ends the stack where it is reached, until they arrive.
//! Where the copy runs out first, [`splice`] continues from the kernel's frame-pointer chain.
//! [`StackBuilder`] turns each sample into a typed [`profile::Stack`] with these.

mod cfi_scan;
mod error;
mod go_frame;
mod loader;
mod modules;
mod process;
mod section;
mod sections;
mod signal_frame;
mod space;
mod splice;
mod stack_builder;
mod sys;

pub use error::UnwindError;
pub use loader::DebugFileFinder;
pub use process::{UnwindLimits, UnwinderSizes, Unwinders, MAX_FRAMES};
pub use profile::{EndCounts, StackEnd, UnwindQuality};
pub use section::{Section, SectionData};
pub use sections::{LoadSegment, UnwindSections};
pub use splice::splice;
pub use stack_builder::StackBuilder;
