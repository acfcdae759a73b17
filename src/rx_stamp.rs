//! When a TCP stream's bytes really moved: the kernel's receive stamp of each read
//! (`SO_TIMESTAMPNS`: when the bytes reached the socket, not when a task got round to reading
//! them) and the instant of each write. The generative client times a request from the write of
//! its bytes and each SSE event from its arrival, so its own task hand-offs and wake-ups under
//! load are not counted in a server's TTFT; the server's request record stamps arrivals the same
//! way. Where the kernel gives no stamp (another OS, a socket option refused) a reader falls back
//! to the instant it read.

use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hyper_util::client::legacy::connect::{Connected, Connection};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// A stamp older than this is not believed (the wall clock stepped in between).
const OLDEST: Duration = Duration::from_secs(60);

/// When a stream last received and last wrote: shared between the stream and whoever reads its
/// bytes (a hyper client's responses carry it in their extensions).
#[derive(Clone, Debug, Default)]
pub struct Stamps(Arc<StampCells>);

#[derive(Debug, Default)]
struct StampCells {
    /// The kernel's stamp of the latest read's last segment, CLOCK_REALTIME ns; 0: none.
    received: AtomicU64,
    /// The start of the latest write, ns after [`anchor`] plus one; 0: none.
    sent: AtomicU64,
}

/// The origin of the `sent` cells.
fn anchor() -> Instant {
    static ANCHOR: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *ANCHOR.get_or_init(Instant::now)
}

impl Stamps {
    /// The arrival of the latest read's last segment, as an [`Instant`]; `None` without a stamp.
    pub fn received(&self) -> Option<Instant> {
        let age = self.age()?;
        Instant::now().checked_sub(age)
    }

    /// The same on CLOCK_MONOTONIC (ns), given its reading now.
    pub fn received_monotonic_ns(&self, now_ns: u64) -> Option<u64> {
        Some(now_ns.saturating_sub(self.age()?.as_nanos() as u64))
    }

    /// Just before the latest write's bytes were handed to the kernel; `None` before any.
    pub fn sent(&self) -> Option<Instant> {
        match self.0.sent.load(Ordering::Acquire) {
            0 => None,
            ns => Some(anchor() + Duration::from_nanos(ns - 1)),
        }
    }

    fn wrote(&self, at: Instant) {
        let ns = at.saturating_duration_since(anchor()).as_nanos() as u64 + 1;
        self.0.sent.store(ns, Ordering::Release);
    }

    fn age(&self) -> Option<Duration> {
        let stamp = self.0.received.load(Ordering::Acquire);
        if stamp == 0 {
            return None;
        }
        let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_nanos() as u64;
        Some(Duration::from_nanos(now.saturating_sub(stamp))).filter(|age| *age < OLDEST)
    }
}

/// A TCP stream that keeps the kernel's receive stamps and its write instants in its [`Stamps`].
#[derive(Debug)]
pub struct StampedStream {
    inner: TcpStream,
    stamps: Stamps,
}

impl StampedStream {
    /// Asks the kernel to stamp what arrives (best effort: without it, no stamps).
    pub fn new(inner: TcpStream) -> StampedStream {
        let on: libc::c_int = 1;
        // SAFETY: a valid socket, an int option of the right size.
        unsafe {
            libc::setsockopt(
                inner.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        StampedStream { inner, stamps: Stamps::default() }
    }

    pub fn stamps(&self) -> Stamps {
        self.stamps.clone()
    }
}

/// One `recvmsg` into `buf`: the bytes read and the kernel's stamp (CLOCK_REALTIME ns), if any.
fn recv_stamped(fd: libc::c_int, buf: &mut [std::mem::MaybeUninit<u8>]) -> io::Result<(usize, Option<u64>)> {
    // Room for one timespec control message, aligned for cmsghdr.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: zeroed msghdr is valid; its pointers name the buffers above, alive for the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: fd is a socket; msg describes writable memory of the stated sizes.
    let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut stamp = None;
    // SAFETY: the kernel filled msg_control up to msg_controllen; the CMSG macros walk it.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                stamp = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok((n as usize, stamp))
}

impl AsyncRead for StampedStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            ready!(this.inner.poll_read_ready(cx))?;
            let fd = this.inner.as_raw_fd();
            // SAFETY: recvmsg only writes into the unfilled part; we mark what it wrote.
            let unfilled = unsafe { buf.unfilled_mut() };
            match this.inner.try_io(Interest::READABLE, || recv_stamped(fd, unfilled)) {
                Ok((n, stamp)) => {
                    // SAFETY: the kernel initialised the first n bytes.
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    if let Some(stamp) = stamp.filter(|_| n > 0) {
                        this.stamps.0.received.store(stamp, Ordering::Release);
                    }
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl StampedStream {
    /// A write, stamped with its start when it wrote something.
    fn stamped(
        &mut self,
        write: impl FnOnce(Pin<&mut TcpStream>) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        let at = Instant::now();
        let done = write(Pin::new(&mut self.inner));
        if let Poll::Ready(Ok(n)) = done {
            if n > 0 {
                self.stamps.wrote(at);
            }
        }
        done
    }
}

impl AsyncWrite for StampedStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().stamped(|inner| inner.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().stamped(|inner| inner.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// A hyper client's connection: its responses carry the stream's [`Stamps`].
impl Connection for StampedStream {
    fn connected(&self) -> Connected {
        Connected::new().extra(self.stamps())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_late_read_is_stamped_when_its_bytes_arrived() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut sender = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let mut stream = StampedStream::new(listener.accept().await.unwrap().0);
        let stamps = stream.stamps();
        assert!(stamps.received().is_none() && stamps.sent().is_none(), "nothing read or written yet");
        // The kernel turns stamping on a moment after the first socket asks (a deferred switch):
        // the first segments may come unstamped, so exchange until one is.
        for _ in 0..50 {
            let sent = Instant::now();
            sender.write_all(b"event").await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            let mut buf = [0u8; 16];
            let n = stream.read(&mut buf).await.unwrap();
            let read = Instant::now();
            assert_eq!(&buf[..n], b"event");
            let Some(at) = stamps.received() else { continue };
            // The stamp is the arrival, before the sleep ended, whatever else the machine does.
            assert!(at >= sent - Duration::from_millis(1), "the stamp is after the send");
            assert!(read.duration_since(at) >= Duration::from_millis(19), "the stamp is before the read");
            let before = Instant::now();
            stream.write_all(b"answer").await.unwrap();
            let wrote = stamps.sent().expect("a write is stamped");
            assert!(wrote >= before && wrote <= Instant::now());
            return;
        }
        panic!("Linux stamps what a TCP socket receives: no stamp in 50 reads");
    }
}
