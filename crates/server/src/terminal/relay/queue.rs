//! A queue from one sender to one receiver whose memory follows what is
//! queued: nothing is allocated until the first message, and the room a
//! burst took is given back once the queue is empty again.
//!
//! Why not `tokio::sync::mpsc`: its unbounded channel allocates its first
//! block of 32 slots and its cache-padded state when it is made, about
//! 1.5 KiB per channel whether anything is ever sent, and a relay side has
//! two (its outgoing pipe and the relay's word to it); with 10,000 idle
//! sessions that is the largest part of the relay's own memory per session
//! (issue 20, docs/decisions.md D-706). Messages are few per wake-up here and
//! a lock taken for a push or a pop costs less than the round trip it
//! serves.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// A queue that held more than this many messages gives its room back once
/// it is empty (a keystroke's queue keeps its few slots).
const KEEP_SLOTS: usize = 8;

/// Makes a queue.
pub(crate) fn queue<T>() -> (QueueSender<T>, QueueReceiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            messages: VecDeque::new(),
            sender_gone: false,
            receiver_gone: false,
        }),
        ready: Notify::new(),
    });
    (
        QueueSender {
            shared: Arc::clone(&shared),
        },
        QueueReceiver { shared },
    )
}

#[derive(Debug)]
struct Shared<T> {
    state: Mutex<State<T>>,
    /// Told after every push and when the sender goes (a permit is kept if
    /// the receiver is not waiting yet).
    ready: Notify,
}

#[derive(Debug)]
struct State<T> {
    messages: VecDeque<T>,
    sender_gone: bool,
    receiver_gone: bool,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A panic while the lock was held cannot leave the queue half
        // changed (each change is one push, pop or flag).
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The sending end.
#[derive(Debug)]
pub(crate) struct QueueSender<T> {
    shared: Arc<Shared<T>>,
}

impl<T> QueueSender<T> {
    /// Queues `message`; gives it back if the receiver is gone.
    pub(crate) fn send(&self, message: T) -> Result<(), T> {
        {
            let mut state = self.shared.lock();
            if state.receiver_gone {
                return Err(message);
            }
            state.messages.push_back(message);
        }
        self.shared.ready.notify_one();
        Ok(())
    }

    /// Whether the receiving end is gone.
    pub(crate) fn is_closed(&self) -> bool {
        self.shared.lock().receiver_gone
    }
}

impl<T> Drop for QueueSender<T> {
    fn drop(&mut self) {
        self.shared.lock().sender_gone = true;
        self.shared.ready.notify_one();
    }
}

/// The receiving end.
#[derive(Debug)]
pub(crate) struct QueueReceiver<T> {
    shared: Arc<Shared<T>>,
}

impl<T> QueueReceiver<T> {
    /// The next message; `None` once the sender is gone and the queue is
    /// empty. Cancel-safe: a message is taken only when this resolves.
    pub(crate) async fn recv(&mut self) -> Option<T> {
        loop {
            {
                let mut state = self.shared.lock();
                if let Some(message) = pop(&mut state) {
                    return Some(message);
                }
                if state.sender_gone {
                    return None;
                }
            }
            // A push between the look above and this wait left a permit.
            self.shared.ready.notified().await;
        }
    }

    /// The next message if one is queued now.
    pub(crate) fn try_recv(&mut self) -> Option<T> {
        pop(&mut self.shared.lock())
    }

    /// Refuses further messages and hands back what is still queued.
    pub(crate) fn close(&mut self) -> VecDeque<T> {
        let mut state = self.shared.lock();
        state.receiver_gone = true;
        std::mem::take(&mut state.messages)
    }
}

impl<T> Drop for QueueReceiver<T> {
    fn drop(&mut self) {
        drop(self.close());
    }
}

/// Pops the first message; an emptied queue that grew beyond
/// [`KEEP_SLOTS`] gives its memory back.
fn pop<T>(state: &mut State<T>) -> Option<T> {
    let message = state.messages.pop_front()?;
    if state.messages.is_empty() && state.messages.capacity() > KEEP_SLOTS {
        state.messages = VecDeque::new();
    }
    Some(message)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn messages_arrive_in_order_and_the_end_follows_the_last() {
        let (tx, mut rx) = queue();
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(n) = rx.recv().await {
                got.push(n);
            }
            got
        });
        for n in 0..100u32 {
            tx.send(n).expect("receiver present");
            if n % 7 == 0 {
                tokio::task::yield_now().await;
            }
        }
        drop(tx);
        let got = tokio::time::timeout(Duration::from_secs(5), reader)
            .await
            .expect("the reader ends")
            .expect("no panic");
        assert_eq!(got, (0..100).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_cancelled_wait_loses_nothing() {
        let (tx, mut rx) = queue();
        // A wait given up before anything came.
        let waited = tokio::time::timeout(Duration::from_millis(10), rx.recv()).await;
        assert!(waited.is_err());
        tx.send(1u8).expect("receiver present");
        assert_eq!(rx.recv().await, Some(1));
        assert_eq!(rx.try_recv(), None);
    }

    #[tokio::test]
    async fn a_gone_receiver_refuses_and_hands_back() {
        let (tx, mut rx) = queue();
        tx.send(1u8).expect("receiver present");
        tx.send(2u8).expect("receiver present");
        assert_eq!(rx.close(), VecDeque::from([1, 2]));
        assert!(tx.is_closed());
        assert_eq!(tx.send(3), Err(3));
    }

    #[test]
    fn an_emptied_burst_gives_its_room_back() {
        let (tx, mut rx) = queue();
        for n in 0..100u32 {
            tx.send(n).expect("receiver present");
        }
        assert!(rx.shared.lock().messages.capacity() >= 100);
        while rx.try_recv().is_some() {}
        assert_eq!(rx.shared.lock().messages.capacity(), 0);
        // A small queue keeps its slots.
        tx.send(1).expect("receiver present");
        assert_eq!(rx.try_recv(), Some(1));
        assert!(rx.shared.lock().messages.capacity() > 0);
    }
}
