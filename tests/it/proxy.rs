//! A fault-injecting TCP proxy for the chaos tests (this machine has no `netem`): it sits on a
//! loopback port in front of a server and, per connection, delays (fixed or jittered, order
//! kept), caps bandwidth, resets or half-closes once so many bytes have passed in a direction,
//! black-holes (accepts and never forwards), drops a fraction of new connections, and resets
//! connections idle for too long. The fault of a new connection comes from a rule over its index,
//! which the test may swap at any time; `black_hole_now` also silences the open connections.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

/// Which way bytes flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Client to server (requests).
    Up,
    /// Server to client (responses).
    Down,
}

/// How a connection is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutKind {
    /// Both sides get a TCP reset.
    Reset,
    /// The receiving side of that direction reads end-of-stream; the other direction goes on.
    HalfClose,
}

/// Cut the connection once `after_bytes` have been forwarded in `direction`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cut {
    pub direction: Direction,
    pub after_bytes: u64,
    pub kind: CutKind,
}

/// What happens to one connection. The default forwards untouched.
#[derive(Clone, Debug, Default)]
pub struct Fault {
    /// Added to every byte's trip, each way.
    pub delay: Duration,
    /// Each chunk is delayed by a further uniform draw in `[0, jitter)`; order is kept.
    pub jitter: Duration,
    /// Delay and bandwidth cap apply only past this many bytes in each direction.
    pub from_byte: u64,
    /// Bytes per second each way.
    pub bandwidth: Option<u64>,
    pub cut: Option<Cut>,
    /// Accept, read and discard, never forward (the server is not even dialled).
    pub black_hole: bool,
    /// A new connection is reset at once with this probability.
    pub drop_fraction: f64,
    /// Reset the connection once no byte has passed either way for this long.
    pub idle_cut: Option<Duration>,
}

type Rule = Arc<dyn Fn(u64) -> Fault + Send + Sync>;

/// What the proxy has seen, for the tests' assertions.
#[derive(Debug, Default)]
pub struct Counters {
    pub accepted: AtomicU64,
    pub dropped: AtomicU64,
    pub cut: AtomicU64,
    pub idle_cut: AtomicU64,
    /// Delayed chunks written, and how late past their due time in all (µs): the proxy's own
    /// error in the delay it adds.
    pub delayed_chunks: AtomicU64,
    pub late_us: AtomicU64,
}

impl Counters {
    /// Mean lateness of a delayed chunk past its due time, in µs (0 with none).
    pub fn mean_late_us(&self) -> f64 {
        let chunks = self.delayed_chunks.load(Ordering::Relaxed);
        self.late_us.load(Ordering::Relaxed) as f64 / chunks.max(1) as f64
    }
}

struct Shared {
    upstream: SocketAddr,
    rule: Mutex<Rule>,
    black_hole_all: AtomicBool,
    counters: Counters,
    seed: AtomicU64,
}

/// A running proxy; dropping it closes its listener and every connection through it.
pub struct Proxy {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Proxies a loopback port to `upstream`, every connection under `fault`.
    pub async fn start(upstream: SocketAddr, fault: Fault) -> Proxy {
        Proxy::with_rule(upstream, move |_| fault.clone()).await
    }

    /// Proxies with the fault of each new connection chosen by its index (0, 1, ...).
    pub async fn with_rule(upstream: SocketAddr, rule: impl Fn(u64) -> Fault + Send + Sync + 'static) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy binds a loopback port");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            upstream,
            rule: Mutex::new(Arc::new(rule)),
            black_hole_all: AtomicBool::new(false),
            counters: Counters::default(),
            seed: AtomicU64::new(0x5eed),
        });
        let task = tokio::spawn(accept_loop(listener, shared.clone()));
        Proxy { addr, shared, task }
    }

    /// New connections get `fault` from now on; open ones keep theirs.
    pub fn set(&self, fault: Fault) {
        *self.shared.rule.lock() = Arc::new(move |_| fault.clone());
    }

    /// Every connection, open or new, stops forwarding in both directions.
    pub fn black_hole_now(&self) {
        self.shared.black_hole_all.store(true, Ordering::Release);
    }

    pub fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    // Owned here, so aborting the accept task drops (and resets) every connection.
    let mut connections = JoinSet::new();
    let mut index = 0u64;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            Some(_) = connections.join_next() => continue,
        };
        let Ok((client, _)) = accepted else { continue };
        let _ = client.set_nodelay(true);
        shared.counters.accepted.fetch_add(1, Ordering::Relaxed);
        let fault = (shared.rule.lock())(index);
        let seed = shared.seed.fetch_add(1, Ordering::Relaxed);
        index += 1;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        if fault.drop_fraction > 0.0 && rng.random_bool(fault.drop_fraction.min(1.0)) {
            shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
            reset(client);
            continue;
        }
        connections.spawn(serve(client, fault, shared.clone(), rng));
    }
}

/// Closes with a TCP reset (SO_LINGER 0) instead of a FIN.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// Why a direction stopped early.
enum Stop {
    /// The planned cut.
    Reset,
    /// `idle_cut` passed with no traffic.
    Idle,
    /// A side went away: the other is reset too.
    Broken,
}

async fn serve(mut client: TcpStream, fault: Fault, shared: Arc<Shared>, rng: rand_chacha::ChaCha8Rng) {
    if fault.black_hole {
        let mut sink = [0u8; 16 * 1024];
        while matches!(client.read(&mut sink).await, Ok(n) if n > 0) {}
        return;
    }
    let Ok(mut server) = TcpStream::connect(shared.upstream).await else {
        reset(client);
        return;
    };
    let _ = server.set_nodelay(true);
    let last_activity = AtomicU64::new(0);
    let started = Instant::now();
    let outcome = {
        let (client_read, client_write) = client.split();
        let (server_read, server_write) = server.split();
        let rng = Mutex::new(rng);
        let pump = |direction, read, write| {
            Pump { direction, fault: &fault, shared: &shared, rng: &rng, last_activity: &last_activity, started }
                .run(read, write)
        };
        let idle = async {
            let Some(limit) = fault.idle_cut else { return std::future::pending().await };
            loop {
                let last = started + Duration::from_micros(last_activity.load(Ordering::Acquire));
                if last.elapsed() >= limit {
                    return Err::<(), Stop>(Stop::Idle);
                }
                tokio::time::sleep_until(last + limit).await;
            }
        };
        tokio::try_join!(
            pump(Direction::Up, client_read, server_write),
            pump(Direction::Down, server_read, client_write),
            idle
        )
    };
    match outcome {
        Ok(_) => {}
        Err(stop) => {
            let counter = match stop {
                Stop::Reset => Some(&shared.counters.cut),
                Stop::Idle => Some(&shared.counters.idle_cut),
                Stop::Broken => None,
            };
            if let Some(counter) = counter {
                counter.fetch_add(1, Ordering::Relaxed);
            }
            reset(client);
            reset(server);
        }
    }
}

/// One direction of one connection.
struct Pump<'a> {
    direction: Direction,
    fault: &'a Fault,
    shared: &'a Shared,
    rng: &'a Mutex<rand_chacha::ChaCha8Rng>,
    last_activity: &'a AtomicU64,
    started: Instant,
}

/// A chunk on its way: when it may be written, and whether the connection is cut after it.
struct InFlight {
    /// `Some` for a delayed chunk: when it may be written.
    due: Option<Instant>,
    bytes: Vec<u8>,
    cut_after: Option<CutKind>,
}

impl Pump<'_> {
    fn touch(&self) {
        self.last_activity.store(self.started.elapsed().as_micros() as u64, Ordering::Release);
    }

    async fn run(self, mut read: ReadHalf<'_>, mut write: WriteHalf<'_>) -> Result<(), Stop> {
        let cut = self.fault.cut.filter(|c| c.direction == self.direction);
        let (tx, mut rx) = mpsc::channel::<InFlight>(256);
        let reading = async {
            // Owned here, so the writer sees the channel close when reading ends.
            let tx = tx;
            let mut seen = 0u64;
            let mut last_due = Instant::now();
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = match read.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                self.touch();
                let mut bytes = buf[..n].to_vec();
                let mut cut_after = None;
                if let Some(cut) = cut {
                    if seen + n as u64 >= cut.after_bytes {
                        bytes.truncate((cut.after_bytes - seen) as usize);
                        cut_after = Some(cut.kind);
                    }
                }
                let delayed = seen + n as u64 > self.fault.from_byte;
                seen += bytes.len() as u64;
                // Due at its arrival (taken once read returns, as an undelayed chunk would be
                // forwarded) plus the delay: an absolute deadline, so time spent handling it here
                // is not added on top.
                let mut due = Instant::now();
                if delayed {
                    due += self.fault.delay;
                    if !self.fault.jitter.is_zero() {
                        due += self.fault.jitter.mul_f64(self.rng.lock().random::<f64>());
                    }
                }
                // TCP keeps order: a chunk never overtakes the one before it.
                due = due.max(last_due);
                last_due = due;
                let due = (due > Instant::now()).then_some(due);
                let last = cut_after.is_some();
                if tx.send(InFlight { due, bytes, cut_after }).await.is_err() || last {
                    return;
                }
            }
        };
        let writing = async {
            let mut next_free = Instant::now();
            while let Some(chunk) = rx.recv().await {
                if let Some(due) = chunk.due {
                    wait_until(due).await;
                    let counters = &self.shared.counters;
                    counters.delayed_chunks.fetch_add(1, Ordering::Relaxed);
                    counters.late_us.fetch_add(due.elapsed().as_micros() as u64, Ordering::Relaxed);
                }
                if !self.shared.black_hole_all.load(Ordering::Acquire) {
                    match self.fault.bandwidth {
                        None => write.write_all(&chunk.bytes).await.map_err(|_| Stop::Broken)?,
                        Some(rate) => {
                            // Pieces of about 10 ms each, every one waiting for its share of time.
                            let piece = (rate / 100).max(1) as usize;
                            for part in chunk.bytes.chunks(piece) {
                                next_free = next_free.max(Instant::now());
                                write.write_all(part).await.map_err(|_| Stop::Broken)?;
                                next_free += Duration::from_secs_f64(part.len() as f64 / rate as f64);
                                tokio::time::sleep_until(next_free).await;
                            }
                        }
                    }
                    self.touch();
                }
                match chunk.cut_after {
                    Some(CutKind::Reset) => return Err(Stop::Reset),
                    Some(CutKind::HalfClose) => {
                        self.shared.counters.cut.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    None => {}
                }
            }
            // End-of-stream (or a half-close) passes on as a FIN, unless black-holed.
            if !self.shared.black_hole_all.load(Ordering::Acquire) {
                let _ = write.shutdown().await;
            } else {
                std::future::pending::<()>().await;
            }
            Ok::<(), Stop>(())
        };
        let ((), written) = tokio::join!(reading, writing);
        written
    }
}

/// Waits until `due` to within microseconds. tokio's timer fires on 1 ms ticks, rounded up (a
/// 10 ms delay fault added about 11 ms each way), and an OS sleep on a blocking thread overshot by
/// the timer slack and two thread hand-offs (the 10 ms faults read +20.6..+20.8 ms of p50 for
/// 20). So the timer sleeps to within 2 ms of `due`, then the task yields until `due`: a polite
/// spin that leaves the worker to other tasks, and a thread that is awake when `due` comes.
async fn wait_until(due: Instant) {
    const SPIN: Duration = Duration::from_millis(2);
    if let Some(coarse) = due.checked_sub(SPIN) {
        tokio::time::sleep_until(coarse).await;
    }
    while Instant::now() < due {
        tokio::task::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    //! The proxy against a plain echo server on loopback: each fault does what it says.
    use super::*;

    /// Echoes every byte back until end-of-stream, then closes.
    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = stream.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                    let _ = w.shutdown().await;
                });
            }
        });
        addr
    }

    /// Sends `len` bytes and reads until `len` come back or the connection ends; returns what
    /// came back and how long the first byte took.
    async fn exchange(addr: SocketAddr, len: usize) -> (std::io::Result<Vec<u8>>, Duration) {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let sent: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let start = Instant::now();
        let (mut r, mut w) = stream.split();
        let writing = async {
            let _ = w.write_all(&sent).await;
        };
        let reading = async {
            let mut got = Vec::new();
            let mut first = None;
            let mut buf = vec![0u8; 64 * 1024];
            while got.len() < len {
                match r.read(&mut buf).await {
                    Ok(0) => break,
                    Ok(n) => {
                        first.get_or_insert_with(|| start.elapsed());
                        got.extend_from_slice(&buf[..n]);
                    }
                    Err(e) => return (Err(e), first.unwrap_or_default()),
                }
            }
            (Ok(got), first.unwrap_or_default())
        };
        let ((), out) = tokio::time::timeout(Duration::from_secs(20), async { tokio::join!(writing, reading) })
            .await
            .expect("the exchange ends");
        out
    }

    #[tokio::test]
    async fn forwards_untouched_by_default() {
        let proxy = Proxy::start(echo_server().await, Fault::default()).await;
        let (got, _) = exchange(proxy.addr, 300_000).await;
        let expected: Vec<u8> = (0..300_000).map(|i| i as u8).collect();
        assert!(got.unwrap() == expected);
        assert_eq!(proxy.counters().accepted.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn delay_is_added_each_way_and_jitter_on_top() {
        let echo = echo_server().await;
        let fixed = Proxy::start(echo, Fault { delay: Duration::from_millis(40), ..Default::default() }).await;
        let (got, first) = exchange(fixed.addr, 10).await;
        assert_eq!(got.unwrap().len(), 10);
        // Through the proxy twice: up and down, 40 ms each.
        assert!(first >= Duration::from_millis(80), "{first:?}");
        let jitter = Fault { jitter: Duration::from_millis(200), ..Default::default() };
        let jittered = Proxy::start(echo, jitter).await;
        let mut firsts = Vec::new();
        for _ in 0..8 {
            let (got, first) = exchange(jittered.addr, 10).await;
            assert_eq!(got.unwrap().len(), 10);
            firsts.push(first);
        }
        assert!(firsts.iter().all(|f| *f < Duration::from_secs(2)), "{firsts:?}");
        // Eight draws of two uniform [0, 200 ms) delays are not all alike.
        let (min, max) = (firsts.iter().min().unwrap(), firsts.iter().max().unwrap());
        assert!(*max - *min >= Duration::from_millis(20), "{firsts:?}");
    }

    #[tokio::test]
    async fn delay_starts_past_from_byte() {
        let fault = Fault { delay: Duration::from_millis(500), from_byte: 1_000, ..Default::default() };
        let proxy = Proxy::start(echo_server().await, fault).await;
        let (got, first) = exchange(proxy.addr, 10).await;
        assert_eq!(got.unwrap().len(), 10);
        assert!(first < Duration::from_millis(500), "the first bytes are not delayed: {first:?}");
    }

    #[tokio::test]
    async fn bandwidth_is_capped() {
        // 200 kB/s each way: 100 kB needs at least half a second.
        let fault = Fault { bandwidth: Some(200_000), ..Default::default() };
        let proxy = Proxy::start(echo_server().await, fault).await;
        let start = Instant::now();
        let (got, _) = exchange(proxy.addr, 100_000).await;
        assert_eq!(got.unwrap().len(), 100_000);
        assert!(start.elapsed() >= Duration::from_millis(450), "{:?}", start.elapsed());
    }

    #[tokio::test]
    async fn reset_after_bytes_forwards_exactly_that_many_then_resets() {
        let cut = Cut { direction: Direction::Down, after_bytes: 5_000, kind: CutKind::Reset };
        let proxy = Proxy::start(echo_server().await, Fault { cut: Some(cut), ..Default::default() }).await;
        let (got, _) = exchange(proxy.addr, 20_000).await;
        match got {
            Ok(bytes) => assert_eq!(bytes.len(), 5_000, "no more than the cut point passes"),
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
        }
        assert_eq!(proxy.counters().cut.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn half_close_up_ends_the_request_and_the_answer_still_comes() {
        let cut = Cut { direction: Direction::Up, after_bytes: 3_000, kind: CutKind::HalfClose };
        let proxy = Proxy::start(echo_server().await, Fault { cut: Some(cut), ..Default::default() }).await;
        let (got, _) = exchange(proxy.addr, 10_000).await;
        // The echo server read end-of-stream after 3,000 bytes, echoed them and closed.
        assert_eq!(got.unwrap().len(), 3_000);
    }

    #[tokio::test]
    async fn black_hole_accepts_and_never_answers() {
        let proxy = Proxy::start(echo_server().await, Fault { black_hole: true, ..Default::default() }).await;
        let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
        stream.write_all(b"hello").await.unwrap();
        let mut buf = [0u8; 8];
        let read = tokio::time::timeout(Duration::from_millis(300), stream.read(&mut buf)).await;
        assert!(read.is_err(), "nothing comes back: {read:?}");
    }

    #[tokio::test]
    async fn black_hole_now_silences_open_connections() {
        let proxy = Proxy::start(echo_server().await, Fault::default()).await;
        let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
        let mut buf = [0u8; 8];
        stream.write_all(b"one").await.unwrap();
        stream.read_exact(&mut buf[..3]).await.unwrap();
        proxy.black_hole_now();
        stream.write_all(b"two").await.unwrap();
        let read = tokio::time::timeout(Duration::from_millis(300), stream.read(&mut buf)).await;
        assert!(read.is_err(), "nothing comes back: {read:?}");
    }

    #[tokio::test]
    async fn a_fraction_of_new_connections_is_dropped() {
        let fault = Fault { drop_fraction: 0.5, ..Default::default() };
        let proxy = Proxy::start(echo_server().await, fault).await;
        let mut answered = 0;
        for _ in 0..100 {
            if matches!(exchange(proxy.addr, 10).await.0, Ok(b) if b.len() == 10) {
                answered += 1;
            }
        }
        let dropped = proxy.counters().dropped.load(Ordering::Relaxed);
        assert_eq!(answered + dropped, 100);
        // Binomial(100, 0.5): 20..80 holds with overwhelming probability (and the seed is fixed).
        assert!((20..=80).contains(&dropped), "{dropped}");
    }

    #[tokio::test]
    async fn rule_picks_the_fault_per_connection_and_set_swaps_it() {
        let echo = echo_server().await;
        let proxy = Proxy::with_rule(echo, |i| Fault { black_hole: i == 1, ..Default::default() }).await;
        assert_eq!(exchange(proxy.addr, 10).await.0.unwrap().len(), 10);
        let mut second = TcpStream::connect(proxy.addr).await.unwrap();
        second.write_all(b"x").await.unwrap();
        let mut buf = [0u8; 1];
        assert!(tokio::time::timeout(Duration::from_millis(300), second.read(&mut buf)).await.is_err());
        assert_eq!(exchange(proxy.addr, 10).await.0.unwrap().len(), 10);
        proxy.set(Fault { drop_fraction: 1.0, ..Default::default() });
        assert!(!matches!(exchange(proxy.addr, 10).await.0, Ok(b) if b.len() == 10));
    }

    #[tokio::test]
    async fn idle_connections_are_reset() {
        let fault = Fault { idle_cut: Some(Duration::from_millis(200)), ..Default::default() };
        let proxy = Proxy::start(echo_server().await, fault).await;
        let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
        let mut buf = [0u8; 8];
        stream.write_all(b"one").await.unwrap();
        stream.read_exact(&mut buf[..3]).await.unwrap();
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await.expect("cut in time");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        assert_eq!(proxy.counters().idle_cut.load(Ordering::Relaxed), 1);
    }
}
