//! Joining a batch of futures in place: the members already box their futures, so the
//! futures and their results sit inline for up to four member I/Os (on blocks kept per
//! thread past that) and nothing is allocated or moved per I/O, where `futures::join_all`
//! boxes an array of wrapper futures and collects the results into a `Vec`.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use raidd_rt::recycle::Table;

/// Member I/Os of a batch held inline: a small write's two to three reads or writes (more
/// spill to the heap, for requests big enough not to notice). Everything here is held
/// across an await, so it is part of every request's state in flight.
pub(crate) const INLINE: usize = 4;

/// Results of a batch of member I/Os, in the batch's order. Like every table here, inline
/// for a small request and on a block kept per thread past that (`raidd_rt::recycle::Table`).
pub(crate) type Results<T> = Table<[T; INLINE]>;

/// Futures of a batch.
pub(crate) type Futures<F> = Table<[F; INLINE]>;

/// One future of a join and, once it is ready, its output in the same place.
pub(crate) enum Joined<F: Future> {
    Running(F),
    Done(F::Output),
}

impl<F: Future> Joined<F> {
    pub(crate) fn output(self) -> F::Output {
        match self {
            Joined::Done(v) => v,
            Joined::Running(_) => unreachable!("every future completed"),
        }
    }
}

/// The futures of a join, each replaced by its output in place as it completes.
pub(crate) type Slots<F> = Table<[Joined<F>; INLINE]>;

/// Runs every future to completion concurrently; their outputs in order.
pub(crate) async fn join_inline<F>(futs: Futures<F>) -> Results<F::Output>
where
    F: Future + Unpin,
{
    let mut slots: Slots<F> = futs.into_iter().map(Joined::Running).collect();
    join_slots(&mut slots).await;
    slots.drain(..).map(Joined::output).collect()
}

/// Polls every running slot until each holds its output.
pub(crate) async fn join_slots<F: Future + Unpin>(slots: &mut Slots<F>) {
    std::future::poll_fn(|cx| {
        let mut all = true;
        for slot in slots.iter_mut() {
            let Joined::Running(fut) = slot else { continue };
            match Pin::new(fut).poll(cx) {
                // Dropping the future at once releases what it holds (windows).
                Poll::Ready(v) => *slot = Joined::Done(v),
                Poll::Pending => all = false,
            }
        }
        if all {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    /// A future that is ready after `n` polls, counting its polls.
    struct After {
        left: u32,
        polls: Rc<Cell<u32>>,
        value: u32,
    }

    impl Future for After {
        type Output = u32;
        fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<u32> {
            self.polls.set(self.polls.get() + 1);
            if self.left == 0 {
                return Poll::Ready(self.value);
            }
            self.left -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    #[test]
    fn join_inline_returns_outputs_in_order_and_polls_none_after_completion() {
        let polls: Vec<Rc<Cell<u32>>> = (0..8).map(|_| Rc::new(Cell::new(0))).collect();
        // Eight futures (beyond the inline four), finishing in a different order than given.
        let futs: Futures<After> = (0..8u32)
            .map(|i| After {
                left: (7 - i) % 3,
                polls: polls[i as usize].clone(),
                value: i * 10,
            })
            .collect();
        let out = raidd_rt::block_on(join_inline(futs));
        assert_eq!(out.as_slice(), &[0, 10, 20, 30, 40, 50, 60, 70]);
        for (i, p) in polls.iter().enumerate() {
            let expect = (7 - i as u32) % 3 + 1;
            assert_eq!(
                p.get(),
                expect,
                "future {i} polled once per pending turn, then never"
            );
        }
        let none: Futures<After> = Futures::default();
        assert!(raidd_rt::block_on(join_inline(none)).is_empty());
    }
}
