//! One direction of the relay: a queue of whole binary messages bounded by
//! bytes (`terminal.relay_buffer_max_bytes`), not by count.
//!
//! The sender takes room for a message before it queues it and the receiver
//! gives the room back only after the message was written to its socket. While
//! there is no room, the sending side's task does not read its socket, so the
//! transport holds the sender back (real backpressure, 6.3).

use std::sync::Arc;

use axum::body::Bytes;
use tokio::sync::Semaphore;

use super::queue::{QueueReceiver, QueueSender, queue};

/// Makes one direction with room for `max_bytes`.
pub(crate) fn pipe(max_bytes: usize) -> (PipeSender, PipeReceiver) {
    let room = Arc::new(Semaphore::new(max_bytes));
    let (tx, rx) = queue();
    (
        PipeSender {
            tx,
            room: Arc::clone(&room),
            max_bytes,
        },
        PipeReceiver { rx, room },
    )
}

/// The sending end (held by the side that reads the message from its socket).
#[derive(Debug)]
pub(crate) struct PipeSender {
    tx: QueueSender<Bytes>,
    room: Arc<Semaphore>,
    max_bytes: usize,
}

/// Why a message was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendRefusal {
    /// Larger than the whole buffer: it can never fit.
    TooLarge,
}

impl PipeSender {
    /// Whether a message of `len` bytes can ever fit.
    pub(crate) fn fits(&self, len: usize) -> Result<(), SendRefusal> {
        if len > self.max_bytes {
            Err(SendRefusal::TooLarge)
        } else {
            Ok(())
        }
    }

    /// Waits for room for `len` bytes (cancel-safe: nothing is taken until it
    /// resolves). Call [`PipeSender::fits`] first.
    pub(crate) async fn reserve(&self, len: usize) {
        let want = u32::try_from(len).unwrap_or(u32::MAX);
        if want == 0 {
            return;
        }
        if let Ok(permit) = self.room.acquire_many(want).await {
            // Given back by the receiver after the write.
            permit.forget();
        }
    }

    /// Queues a message whose room was reserved. If the receiving end is gone
    /// (a side paired once whose peer left), the message is dropped and its
    /// room given back, so the sender keeps reading its socket.
    pub(crate) fn send(&self, message: Bytes) {
        if let Err(message) = self.tx.send(message) {
            self.room.add_permits(message.len());
        }
    }

    /// Whether the receiving end is gone.
    pub(crate) fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// The receiving end (held by the side that writes the messages to its socket).
#[derive(Debug)]
pub(crate) struct PipeReceiver {
    rx: QueueReceiver<Bytes>,
    room: Arc<Semaphore>,
}

impl PipeReceiver {
    /// The next message; `None` once the sender is gone and the queue empty.
    pub(crate) async fn recv(&mut self) -> Option<Bytes> {
        self.rx.recv().await
    }

    /// The next message if one is queued now; `None` when the queue is empty
    /// (or the sender gone: [`PipeReceiver::recv`] then says so).
    pub(crate) fn try_recv(&mut self) -> Option<Bytes> {
        self.rx.try_recv()
    }

    /// Gives the room of a written message back.
    pub(crate) fn written(&self, len: usize) {
        self.room.add_permits(len);
    }
}

impl Drop for PipeReceiver {
    fn drop(&mut self) {
        // Whatever is still queued will never be written: give its room back
        // so a sender waiting for it does not wait for ever.
        let left: usize = self.rx.close().iter().map(Bytes::len).sum();
        self.room.add_permits(left);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn room_comes_back_only_after_the_write() {
        let (tx, mut rx) = pipe(10);
        assert_eq!(tx.fits(11), Err(SendRefusal::TooLarge));
        tx.reserve(6).await;
        tx.send(Bytes::from_static(b"abcdef"));
        // 4 left: a reservation of 5 waits.
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(20), tx.reserve(5));
        assert!(waiting.await.is_err());
        let message = rx.recv().await.expect("queued");
        assert_eq!(&message[..], b"abcdef");
        rx.written(message.len());
        tx.reserve(5).await;
    }

    #[tokio::test]
    async fn a_gone_receiver_gives_the_room_back() {
        let (tx, rx) = pipe(4);
        tx.reserve(4).await;
        tx.send(Bytes::from_static(b"abcd"));
        drop(rx);
        assert!(tx.is_closed());
        tx.reserve(4).await;
        tx.send(Bytes::from_static(b"efgh"));
        tx.reserve(4).await;
    }
}
