//! smoltcp-bench -- smoltcp 0.14 under the stackeval harness.
//!
//! Two smoltcp Interfaces (A = client, B = server), each with its own SocketSet, polled from ONE
//! thread and joined by an in-memory Ethernet link (MTU 1500) that the harness drives.  The
//! device (`Dev`) hands out tokens over the harness's own frame pool (the "foreign buffer pool"):
//! `RxToken::consume` gives smoltcp the pool buffer the frame already sits in, and
//! `TxToken::consume` gives it a free pool buffer to build the frame in.  smoltcp never sees a
//! buffer of its own at the device boundary; the harness never copies a frame.
//!
//! Modes (one JSON object on stdout), mirroring ../lwip/lwip_bench.c:
//!   bulk  --family 4|6 --seconds S [--buf BYTES]       one connection A->B, payload Gbit/s
//!   conns --family 4|6 --conns N [--buf BYTES] [--backlog K]
//!         N concurrent connections A->B, 1 KiB each echoed by B.  smoltcp has no listen
//!         backlog: every connection B accepts is a socket created beforehand in Listen state.
//!         Without --backlog, N listening sockets are created up front; with --backlog K, B keeps
//!         K sockets listening and tops them up after each poll (what a listen(fd, K) would have
//!         to become), and SYNs that find no listening socket are answered with RST.

mod frames;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Instant as StdInstant;

use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{Device, DeviceCapabilities, Medium, RxToken, TxToken};
use smoltcp::socket::tcp;
use smoltcp::time::Instant;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr};

// ---------- heap accounting ----------

struct Counting;
static HEAP: AtomicUsize = AtomicUsize::new(0);
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        HEAP.fetch_add(l.size(), Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        HEAP.fetch_add(l.size(), Relaxed);
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        HEAP.fetch_sub(l.size(), Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        HEAP.fetch_add(n, Relaxed);
        HEAP.fetch_sub(l.size(), Relaxed);
        unsafe { System.realloc(p, l, n) }
    }
}
#[global_allocator]
static GA: Counting = Counting;

fn heap() -> usize {
    HEAP.load(Relaxed)
}
fn rss_kib() -> i64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: i64 = s.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
    pages * 4
}
fn trim() {
    extern "C" {
        fn malloc_trim(pad: usize) -> i32;
    }
    unsafe {
        malloc_trim(0);
    }
}

// ---------- the link and the foreign frame pool ----------

const FRAME_BUF: usize = 2048;

struct LinkState {
    free: Vec<u32>,
    q: [VecDeque<(u32, u16)>; 2], // q[s]: frames travelling towards side s
    pool_n: usize,
    used_max: usize,
    stats: frames::FrameStats,
    rx_in_place: u64,  // frames smoltcp parsed straight out of a pool buffer
    tx_in_place: u64,  // frames smoltcp built straight into a pool buffer
    tx_no_buffer: u64, // a TxToken consumed with the pool empty: frame dropped
}

struct Link {
    st: RefCell<LinkState>,
    mem: *mut u8, // pool_n * FRAME_BUF bytes, never freed
}

impl Link {
    fn new(pool_n: usize) -> Link {
        let mut v = vec![0u8; pool_n * FRAME_BUF];
        v.iter_mut().step_by(4096).for_each(|b| *b = 1); // pre-fault: harness memory, in the baseline
        let mem = Box::leak(v.into_boxed_slice()).as_mut_ptr();
        Link {
            st: RefCell::new(LinkState {
                free: (0..pool_n as u32).rev().collect(),
                q: [VecDeque::with_capacity(pool_n), VecDeque::with_capacity(pool_n)],
                pool_n,
                used_max: 0,
                stats: frames::FrameStats::default(),
                rx_in_place: 0,
                tx_in_place: 0,
                tx_no_buffer: 0,
            }),
            mem,
        }
    }
    fn buf(&self, idx: u32, len: usize) -> &mut [u8] {
        // SAFETY: idx is owned by exactly one token or queue entry at a time.
        unsafe { std::slice::from_raw_parts_mut(self.mem.add(idx as usize * FRAME_BUF), len) }
    }
}

struct Dev<'a> {
    link: &'a Link,
    side: usize,
}

/// --csum-offload: tell smoltcp the device computes and checks IPv4/TCP checksums (as a NIC
/// with offload would; the harness's link does neither, it never corrupts a frame).  Off by
/// default: both stacks then compute and verify every checksum in software.
static CSUM_OFFLOAD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
struct Rx<'a> {
    link: &'a Link,
    idx: u32,
    len: u16,
}
struct Tx<'a> {
    link: &'a Link,
    side: usize,
}

impl RxToken for Rx<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        let frame = self.link.buf(self.idx, self.len as usize);
        let r = f(frame); // smoltcp parses the frame where it lies (and may reply through a Tx)
        let mut st = self.link.st.borrow_mut();
        st.rx_in_place += 1;
        st.free.push(self.idx); // back to the pool as soon as the stack returns
        r
    }
}

impl TxToken for Tx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let idx = {
            let mut st = self.link.st.borrow_mut();
            let i = st.free.pop();
            let used = st.pool_n - st.free.len();
            if used > st.used_max {
                st.used_max = used;
            }
            i
        };
        match idx {
            Some(idx) => {
                assert!(len <= FRAME_BUF);
                let frame = self.link.buf(idx, len);
                let r = f(frame); // smoltcp writes headers and payload into the pool buffer
                let mut st = self.link.st.borrow_mut();
                st.stats.inspect(self.side, frame);
                st.tx_in_place += 1;
                st.q[1 - self.side].push_back((idx, len as u16));
                r
            }
            None => {
                self.link.st.borrow_mut().tx_no_buffer += 1;
                let mut tmp = vec![0u8; len];
                f(&mut tmp)
            }
        }
    }
}

impl Device for Dev<'_> {
    type RxToken<'b>
        = Rx<'b>
    where
        Self: 'b;
    type TxToken<'b>
        = Tx<'b>
    where
        Self: 'b;
    fn receive(&mut self, _t: Instant) -> Option<(Rx<'_>, Tx<'_>)> {
        let (idx, len) = self.link.st.borrow_mut().q[self.side].pop_front()?;
        Some((Rx { link: self.link, idx, len }, Tx { link: self.link, side: self.side }))
    }
    fn transmit(&mut self, _t: Instant) -> Option<Tx<'_>> {
        if self.link.st.borrow().free.is_empty() {
            return None;
        }
        Some(Tx { link: self.link, side: self.side })
    }
    fn capabilities(&self) -> DeviceCapabilities {
        let mut c = DeviceCapabilities::default();
        c.medium = Medium::Ethernet;
        c.max_transmission_unit = 1514; // Ethernet MTU 1500 + 14-byte header
        if CSUM_OFFLOAD.load(Relaxed) {
            c.checksum.ipv4 = smoltcp::phy::Checksum::None;
            c.checksum.tcp = smoltcp::phy::Checksum::None;
        }
        c
    }
}

// ---------- one stack instance ----------

struct Side {
    iface: Interface,
    sockets: SocketSet<'static>,
    poll_ns: u128,
}

fn addr(side: usize, family: u8) -> IpAddress {
    if family == 4 {
        IpAddress::v4(10, 0, 0, 1 + side as u8)
    } else {
        IpAddress::v6(0xfd00, 0, 0, 0, 0, 0, 0, 1 + side as u16)
    }
}

fn make_side(link: &Link, side: usize) -> Side {
    let mut cfg = Config::new(HardwareAddress::Ethernet(EthernetAddress([2, 0, 0, 0, 0, 1 + side as u8])));
    cfg.random_seed = 0x5eed_0000 + side as u64;
    let mut dev = Dev { link, side };
    let mut iface = Interface::new(cfg, &mut dev, Instant::now());
    iface.update_ip_addrs(|a| {
        a.push(IpCidr::new(addr(side, 4), 24)).unwrap();
        a.push(IpCidr::new(addr(side, 6), 64)).unwrap();
    });
    Side { iface, sockets: SocketSet::new(vec![]), poll_ns: 0 }
}

fn poll(link: &Link, s: &mut Side, side: usize) {
    let t = StdInstant::now();
    let mut dev = Dev { link, side };
    s.iface.poll(Instant::now(), &mut dev, &mut s.sockets);
    s.poll_ns += t.elapsed().as_nanos();
}

fn new_socket(buf: usize) -> tcp::Socket<'static> {
    tcp::Socket::new(tcp::SocketBuffer::new(vec![0u8; buf]), tcp::SocketBuffer::new(vec![0u8; buf]))
}

fn sock(s: &mut Side, h: SocketHandle) -> &mut tcp::Socket<'static> {
    s.sockets.get_mut::<tcp::Socket>(h)
}

fn link_json(link: &Link) -> String {
    let st = link.st.borrow();
    format!(
        "\"rx_in_place_frames\":{},\"tx_in_place_frames\":{},\"tx_no_buffer\":{},\"pool_buffers_max_in_use\":{},\"link\":{}",
        st.rx_in_place,
        st.tx_in_place,
        st.tx_no_buffer,
        st.used_max,
        st.stats.json()
    )
}

// ---------- bulk ----------

fn bulk(family: u8, seconds: f64, buf: usize) {
    let link = Link::new(8192);
    let mut a = make_side(&link, 0);
    let mut b = make_side(&link, 1);
    let srv = b.sockets.add(new_socket(buf));
    sock(&mut b, srv).listen(5001).unwrap();
    let cli = a.sockets.add(new_socket(buf));
    let cx = a.iface.context();
    a.sockets.get_mut::<tcp::Socket>(cli).connect(cx, (addr(1, family), 5001), 49152).unwrap();

    let src: Vec<u8> = (0..65536u32).map(|i| (i * 7) as u8).collect();
    let mut sink = vec![0u8; 65536];
    let mut sunk: u64 = 0;
    let tc = StdInstant::now();
    let mut turn = |a: &mut Side, b: &mut Side, fill: bool, sunk: &mut u64| {
        if fill {
            let s = sock(a, cli);
            while s.can_send() {
                match s.send_slice(&src) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        }
        poll(&link, a, 0);
        poll(&link, b, 1);
        let s = sock(b, srv);
        while s.can_recv() {
            match s.recv_slice(&mut sink) {
                Ok(n) if n > 0 => *sunk += n as u64,
                _ => break,
            }
        }
    };
    while sock(&mut a, cli).state() != tcp::State::Established {
        turn(&mut a, &mut b, false, &mut sunk);
        if tc.elapsed().as_secs_f64() > 10.0 {
            eprintln!("no connection (state {})", sock(&mut a, cli).state());
            std::process::exit(3);
        }
    }
    let connect_ms = tc.elapsed().as_secs_f64() * 1e3;
    let tw = StdInstant::now();
    while tw.elapsed().as_secs_f64() < 0.2 {
        turn(&mut a, &mut b, true, &mut sunk);
    }
    let b0 = sunk;
    let (pa, pb) = (a.poll_ns, b.poll_ns);
    let t0 = StdInstant::now();
    let mut turns: u64 = 0;
    while t0.elapsed().as_secs_f64() < seconds {
        turn(&mut a, &mut b, true, &mut sunk);
        turns += 1;
    }
    let el = t0.elapsed().as_secs_f64();
    let bytes = sunk - b0;
    println!(
        "{{\"stack\":\"smoltcp\",\"mode\":\"bulk\",\"family\":{},\"buf\":{},\"seconds\":{:.3},\"payload_bytes\":{},\
         \"gbps\":{:.4},\"turns\":{},\"connect_ms\":{:.2},\"poll_share\":{:.3},\"csum_offload\":{},{}}}",
        family,
        buf,
        el,
        bytes,
        bytes as f64 * 8.0 / el / 1e9,
        turns,
        connect_ms,
        ((a.poll_ns - pa) + (b.poll_ns - pb)) as f64 / 1e9 / el,
        CSUM_OFFLOAD.load(Relaxed),
        link_json(&link)
    );
}

// ---------- many connections, 1 KiB echo ----------

const ECHO_LEN: usize = 1024;

struct Cli {
    h: SocketHandle,
    port: u16,
    sent: bool,
    got: usize,
    done: bool,
    was_established: bool,
}

struct Echo {
    family: u8,
    backlog: Option<usize>,
    buf: usize,
    listening: Vec<SocketHandle>, // B: sockets in Listen state (or just left it)
    serving: Vec<SocketHandle>,   // B: accepted connections
    refused: u64,
    next_port: u32,
    bad: u64,
}

impl Echo {
    fn add_listener(&mut self, b: &mut Side) {
        let h = b.sockets.add(new_socket(self.buf));
        sock(b, h).listen(7).unwrap();
        self.listening.push(h);
    }
    /// B's side of a turn: move sockets that left Listen to `serving`, top up the backlog,
    /// echo what arrived.
    fn serve(&mut self, b: &mut Side) {
        let mut i = 0;
        while i < self.listening.len() {
            let h = self.listening[i];
            if sock(b, h).state() != tcp::State::Listen {
                self.listening.swap_remove(i);
                self.serving.push(h);
            } else {
                i += 1;
            }
        }
        if let Some(k) = self.backlog {
            while self.listening.len() < k {
                self.add_listener(b);
            }
        }
        let mut tmp = [0u8; ECHO_LEN * 4];
        for &h in &self.serving {
            let s = sock(b, h);
            if s.can_recv() {
                if let Ok(n) = s.recv_slice(&mut tmp) {
                    if s.send_slice(&tmp[..n]) != Ok(n) {
                        self.bad += 1;
                    }
                }
            }
        }
    }
    fn client(&mut self, a: &mut Side, c: &mut [Cli], pattern: &[u8], done: &mut usize) {
        let mut tmp = [0u8; ECHO_LEN];
        for cl in c.iter_mut().filter(|cl| !cl.done) {
            let s = sock(a, cl.h);
            match s.state() {
                tcp::State::Established => {
                    cl.was_established = true;
                    if !cl.sent {
                        if s.send_slice(pattern) != Ok(ECHO_LEN) {
                            self.bad += 1;
                        }
                        cl.sent = true;
                    }
                }
                tcp::State::Closed if !cl.was_established => {
                    // refused: no socket was listening for the SYN (RST); connect again from
                    // the same port (B kept no state for the refused attempt)
                    self.refused += 1;
                    let cx = a.iface.context();
                    let s = a.sockets.get_mut::<tcp::Socket>(cl.h);
                    s.connect(cx, (addr(1, self.family), 7), cl.port).unwrap();
                    continue;
                }
                _ => {}
            }
            if s.can_recv() {
                if let Ok(n) = s.recv_slice(&mut tmp) {
                    if cl.got + n > ECHO_LEN || tmp[..n] != pattern[cl.got..cl.got + n] {
                        self.bad += 1;
                    }
                    cl.got += n;
                    if cl.got >= ECHO_LEN {
                        cl.done = true;
                        *done += 1;
                    }
                }
            }
        }
    }
}

fn conns(family: u8, n: usize, buf: usize, backlog: Option<usize>) {
    let link = Link::new((n * 3).max(8192));
    let mut a = make_side(&link, 0);
    let mut b = make_side(&link, 1);
    let pattern: Vec<u8> = (0..ECHO_LEN as u32).map(|i| (i * 13 + 1) as u8).collect();
    let mut e = Echo {
        family,
        backlog: None, // set after the warm-up
        buf,
        listening: vec![],
        serving: vec![],
        refused: 0,
        next_port: 10000,
        bad: 0,
    };

    // warm-up: one echo; ARP / neighbour discovery resolves over the link here
    e.add_listener(&mut b);
    let wh = a.sockets.add(new_socket(buf));
    let cx = a.iface.context();
    a.sockets.get_mut::<tcp::Socket>(wh).connect(cx, (addr(1, family), 7), 9999).unwrap();
    let mut w = vec![Cli { h: wh, port: 9999, sent: false, got: 0, done: false, was_established: false }];
    let mut wdone = 0;
    let tw = StdInstant::now();
    while wdone < 1 {
        poll(&link, &mut a, 0);
        poll(&link, &mut b, 1);
        e.serve(&mut b);
        e.client(&mut a, &mut w, &pattern, &mut wdone);
        if tw.elapsed().as_secs_f64() > 10.0 {
            eprintln!("warm-up failed");
            std::process::exit(3);
        }
    }
    sock(&mut a, wh).abort();
    for _ in 0..20 {
        poll(&link, &mut a, 0);
        poll(&link, &mut b, 1);
    }
    a.sockets.remove(wh);
    for h in e.serving.drain(..) {
        b.sockets.remove(h);
    }
    e.refused = 0;
    e.bad = 0;

    // listeners: N up front, or the K of a backlog (topped up in serve())
    trim();
    let (rss0, h0) = (rss_kib(), heap());
    let tl = StdInstant::now();
    e.backlog = backlog;
    let want = backlog.unwrap_or(n);
    while e.listening.len() < want {
        e.add_listener(&mut b);
    }
    let listen_create_s = tl.elapsed().as_secs_f64();
    let (rss1, h1) = (rss_kib(), heap());

    // clients
    let mut c: Vec<Cli> = Vec::with_capacity(n);
    for _ in 0..n {
        let h = a.sockets.add(new_socket(buf));
        let port = e.next_port as u16;
        e.next_port += 1;
        c.push(Cli { h, port, sent: false, got: 0, done: false, was_established: false });
    }
    let (rss2, h2) = (rss_kib(), heap());

    let (pa, pb) = (a.poll_ns, b.poll_ns);
    let t0 = StdInstant::now();
    for cl in c.iter_mut() {
        let cx = a.iface.context();
        a.sockets.get_mut::<tcp::Socket>(cl.h).connect(cx, (addr(1, family), 7), cl.port).unwrap();
    }
    let mut done = 0usize;
    let mut turns = 0u64;
    while done < n && t0.elapsed().as_secs_f64() < 120.0 {
        poll(&link, &mut a, 0);
        poll(&link, &mut b, 1);
        e.serve(&mut b);
        e.client(&mut a, &mut c, &pattern, &mut done);
        turns += 1;
    }
    let el = t0.elapsed().as_secs_f64();
    let poll_s = ((a.poll_ns - pa) + (b.poll_ns - pb)) as f64 / 1e9;
    let (rss3, h3) = (rss_kib(), heap());
    // settle 1 s (delayed ACKs flushed, nothing left unacknowledged), then measure again
    let ts = StdInstant::now();
    while ts.elapsed().as_secs_f64() < 1.0 {
        poll(&link, &mut a, 0);
        poll(&link, &mut b, 1);
        e.serve(&mut b);
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    let (rss4, h4) = (rss_kib(), heap());
    println!(
        "{{\"stack\":\"smoltcp\",\"mode\":\"conns\",\"family\":{},\"buf\":{},\"backlog\":{},\"conns\":{},\
         \"completed\":{},\"refused_and_retried\":{},\"bad\":{},\"finished\":{},\"seconds\":{:.4},\"turns\":{},\
         \"poll_seconds\":{:.4},\"listeners_created\":{},\"listen_create_seconds\":{:.4},\
         \"rss_kib_before\":{},\"rss_kib_after\":{},\"rss_bytes_per_conn\":{:.0},\
         \"heap_bytes_per_listener\":{:.0},\"heap_bytes_per_client\":{:.0},\"heap_bytes_per_conn\":{:.0},\
         \"rss_bytes_per_listener\":{:.0},\"settled_rss_bytes_per_conn\":{:.0},\"settled_heap_bytes_per_conn\":{:.0},\
         \"sizeof_tcp_socket\":{},\"sockets_A\":{},\"sockets_B\":{},{}}}",
        family,
        buf,
        backlog.map(|k| k.to_string()).unwrap_or("null".into()),
        n,
        done,
        e.refused,
        e.bad,
        done == n,
        el,
        turns,
        poll_s,
        e.listening.len() + e.serving.len(),
        listen_create_s,
        rss0,
        rss3,
        (rss3 - rss0) as f64 * 1024.0 / n as f64,
        (h1 as f64 - h0 as f64) / want as f64,
        (h2 as f64 - h1 as f64) / n as f64,
        (h3 as f64 - h0 as f64) / n as f64,
        (rss1 - rss0) as f64 * 1024.0 / want as f64,
        (rss4 - rss0) as f64 * 1024.0 / n as f64,
        (h4 as f64 - h0 as f64) / n as f64,
        std::mem::size_of::<tcp::Socket>(),
        a.sockets.iter().count(),
        b.sockets.iter().count(),
        link_json(&link)
    );
    let _ = rss2;
}

fn main() {
    let mut mode = "bulk".to_string();
    let (mut family, mut seconds, mut n, mut buf, mut backlog) = (4u8, 3.0f64, 1000usize, 0usize, None);
    let args: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < args.len() {
        let v = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--mode" => mode = v,
            "--family" => family = v.parse().unwrap(),
            "--seconds" => seconds = v.parse().unwrap(),
            "--conns" => n = v.parse().unwrap(),
            "--buf" => buf = v.parse().unwrap(),
            "--backlog" => backlog = Some(v.parse().unwrap()),
            "--csum-offload" => {
                CSUM_OFFLOAD.store(true, Relaxed);
                i += 1;
                continue;
            }
            _ => {
                eprintln!("usage: smoltcp-bench [--mode bulk|conns] [--family 4|6] [--seconds S] [--conns N] [--buf BYTES] [--backlog K] [--csum-offload]");
                std::process::exit(2);
            }
        }
        i += 2;
    }
    assert!(family == 4 || family == 6);
    match mode.as_str() {
        "bulk" => bulk(family, seconds, if buf == 0 { 65536 } else { buf }),
        "conns" => conns(family, n, if buf == 0 { 4096 } else { buf }, backlog),
        _ => std::process::exit(2),
    }
}
