//! Large answers (folded text, pprof, a timeline, a recording's result, a scrape) sent in
//! pieces, holding what bounds them until they are sent: the query slot (or scrape place)
//! that built an answer is released only when its last piece has been handed to the
//! connection, or when the connection goes away (its client closed it, or it accepted no
//! byte for the write timeout: `conn::WriteTimeout`).
//!
//! So what one user's unread answers hold is bounded by their query slots
//! (`api.max_queries_per_user`), not by their connections: a reader that stops reading keeps
//! its slot busy, and its next query is refused (503) until the connection is closed.
//!
//! Each piece is a copy of [`PIECE`] bytes, so that what the connection still has queued
//! after the answer is released never keeps the whole answer's allocation alive.

use std::any::Any;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};

/// Bytes handed to the connection at a time. hyper buffers up to about 400 KiB of them before
/// it writes; past that it asks for no more until the socket takes what it has.
pub const PIECE: usize = 64 << 10;

/// An answer's bytes and what is held until they are sent.
pub struct Held {
    bytes: Vec<u8>,
    sent: usize,
    guard: Option<Box<dyn Any + Send + Sync>>,
}

impl Held {
    /// `bytes`, holding `guard` (a query slot, a scrape place) until the last piece is taken
    /// or the answer dropped.
    pub fn new(bytes: Vec<u8>, guard: impl Any + Send + Sync) -> Held {
        Held {
            bytes,
            sent: 0,
            guard: Some(Box::new(guard)),
        }
    }

    /// As a response body.
    pub fn body(bytes: Vec<u8>, guard: impl Any + Send + Sync) -> Body {
        Body::new(Held::new(bytes, guard))
    }

    fn left(&self) -> usize {
        self.bytes.len() - self.sent
    }
}

impl http_body::Body for Held {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.left() == 0 {
            this.release();
            return Poll::Ready(None);
        }
        let end = this.sent + this.left().min(PIECE);
        let piece = Bytes::copy_from_slice(&this.bytes[this.sent..end]);
        this.sent = end;
        if this.left() == 0 {
            this.release();
        }
        Poll::Ready(Some(Ok(Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.left() == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left() as u64)
    }
}

impl Held {
    /// The answer is sent (all but the last piece, which the connection holds): free it and
    /// release the guard.
    fn release(&mut self) {
        self.bytes = Vec::new();
        self.sent = 0;
        self.guard = None;
    }

    /// Whether the guard is still held.
    #[cfg(test)]
    fn holds(&self) -> bool {
        self.guard.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;
    use std::sync::Arc;

    #[test]
    fn the_guard_is_held_until_the_last_piece_is_taken() {
        let guard = Arc::new(());
        let mut held = Held::new(vec![7u8; 2 * PIECE + 5], Arc::clone(&guard));
        assert_eq!(
            http_body::Body::size_hint(&held).exact(),
            Some(2 * PIECE as u64 + 5)
        );
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut got = Vec::new();
        for want in [PIECE, PIECE, 5] {
            assert!(held.holds() && Arc::strong_count(&guard) == 2);
            let Poll::Ready(Some(Ok(frame))) = Pin::new(&mut held).poll_frame(&mut cx) else {
                panic!("no piece");
            };
            let piece = frame.into_data().unwrap();
            assert_eq!(piece.len(), want);
            got.extend_from_slice(&piece);
        }
        assert_eq!(got.len(), 2 * PIECE + 5);
        // The last piece taken: released, while the connection still holds that piece.
        assert!(!held.holds());
        assert_eq!(Arc::strong_count(&guard), 1);
        assert!(http_body::Body::is_end_stream(&held));
        // Dropped before it was sent (the connection went away): released too.
        let held = Held::new(vec![1; 10], Arc::clone(&guard));
        assert_eq!(Arc::strong_count(&guard), 2);
        drop(held);
        assert_eq!(Arc::strong_count(&guard), 1);
    }
}
