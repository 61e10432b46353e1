//! What the harness sees on its in-memory Ethernet link: the same parser and the same JSON as
//! ../../common/frames.h (the lwIP harness), so that both report alike.

#[derive(Clone, Copy, Default)]
pub struct SynOpts {
    pub seen: bool,
    pub mss: i32,
    pub wscale: i32,
    pub sack_perm: bool,
    pub timestamps: bool,
    pub window: u32,
}

#[derive(Default)]
pub struct FrameStats {
    pub frames: [u64; 2],
    pub bytes: [u64; 2],
    pub arp_req: [u64; 2],
    pub arp_rep: [u64; 2],
    pub nd_ns: [u64; 2],
    pub nd_na: [u64; 2],
    pub nd_rs: [u64; 2],
    pub mld: [u64; 2],
    pub tcp: [u64; 2],
    pub tcp_payload: [u64; 2],
    pub sack_blocks: [u64; 2],
    pub rst: [u64; 2],
    pub syn: SynOpts,
    pub synack: SynOpts,
    pub max_win_field: [u32; 2],
}

fn rd16(p: &[u8]) -> u16 {
    (p[0] as u16) << 8 | p[1] as u16
}

impl FrameStats {
    fn tcp_seg(&mut self, side: usize, t: &[u8]) {
        if t.len() < 20 {
            return;
        }
        let doff = (t[12] >> 4) as usize * 4;
        if doff < 20 || doff > t.len() {
            return;
        }
        let flags = t[13];
        let win = rd16(&t[14..]) as u32;
        self.tcp[side] += 1;
        self.tcp_payload[side] += (t.len() - doff) as u64;
        if flags & 0x04 != 0 {
            self.rst[side] += 1;
        }
        let mut o = SynOpts { seen: true, mss: -1, wscale: -1, sack_perm: false, timestamps: false, window: win };
        let mut i = 20;
        while i < doff {
            let k = t[i];
            if k == 0 {
                break;
            }
            if k == 1 {
                i += 1;
                continue;
            }
            if i + 1 >= doff {
                break;
            }
            let l = t[i + 1] as usize;
            if l < 2 || i + l > doff {
                break;
            }
            match (k, l) {
                (2, 4) => o.mss = rd16(&t[i + 2..]) as i32,
                (3, 3) => o.wscale = t[i + 2] as i32,
                (4, _) => o.sack_perm = true,
                (5, _) => self.sack_blocks[side] += ((l - 2) / 8) as u64,
                (8, _) => o.timestamps = true,
                _ => {}
            }
            i += l;
        }
        if flags & 0x02 != 0 {
            let d = if flags & 0x10 != 0 { &mut self.synack } else { &mut self.syn };
            if !d.seen {
                *d = o;
            }
        } else if win > self.max_win_field[side] {
            self.max_win_field[side] = win;
        }
    }

    pub fn inspect(&mut self, side: usize, f: &[u8]) {
        self.frames[side] += 1;
        self.bytes[side] += f.len() as u64;
        if f.len() < 14 {
            return;
        }
        let et = rd16(&f[12..]);
        let p = &f[14..];
        if et == 0x0806 && p.len() >= 8 {
            match rd16(&p[6..]) {
                1 => self.arp_req[side] += 1,
                2 => self.arp_rep[side] += 1,
                _ => {}
            }
        } else if et == 0x0800 && p.len() >= 20 {
            let ihl = (p[0] & 15) as usize * 4;
            let tot = rd16(&p[2..]) as usize;
            if p[9] == 6 && tot <= p.len() && ihl < tot {
                self.tcp_seg(side, &p[ihl..tot]);
            }
        } else if et == 0x86dd && p.len() >= 40 {
            let mut plen = rd16(&p[4..]) as usize;
            let mut nh = p[6];
            if 40 + plen > p.len() {
                return;
            }
            let mut q = &p[40..40 + plen];
            if nh == 0 && plen >= 8 {
                let hl = (q[1] as usize + 1) * 8;
                nh = q[0];
                q = &q[hl.min(q.len())..];
                plen = q.len();
            }
            if nh == 6 {
                self.tcp_seg(side, q);
            } else if nh == 58 && plen >= 1 {
                match q[0] {
                    133 => self.nd_rs[side] += 1,
                    135 => self.nd_ns[side] += 1,
                    136 => self.nd_na[side] += 1,
                    131 | 132 | 143 => self.mld[side] += 1,
                    _ => {}
                }
            }
        }
    }

    fn syn_json(o: &SynOpts) -> String {
        if !o.seen {
            return "null".into();
        }
        format!(
            "{{\"mss\":{},\"wscale\":{},\"sack_permitted\":{},\"timestamps\":{},\"window\":{}}}",
            o.mss, o.wscale, o.sack_perm, o.timestamps, o.window
        )
    }

    pub fn json(&self) -> String {
        let ws = self.syn.wscale >= 0 && self.synack.wscale >= 0;
        let mut s = format!(
            "{{\"syn\":{},\"synack\":{},\"wscale_negotiated\":{},\"sack_negotiated\":{}",
            Self::syn_json(&self.syn),
            Self::syn_json(&self.synack),
            ws,
            self.syn.sack_perm && self.synack.sack_perm
        );
        for side in 0..2 {
            let shift = if ws { if side == 1 { self.synack.wscale } else { self.syn.wscale } } else { 0 };
            s += &format!(
                ",\"{}\":{{\"frames\":{},\"bytes\":{},\"arp_req\":{},\"arp_rep\":{},\"nd_ns\":{},\"nd_na\":{},\
                 \"nd_rs\":{},\"mld\":{},\"tcp\":{},\"tcp_payload\":{},\"sack_blocks\":{},\"rst\":{},\
                 \"max_window_field\":{},\"max_window_bytes\":{}}}",
                if side == 1 { "from_B" } else { "from_A" },
                self.frames[side],
                self.bytes[side],
                self.arp_req[side],
                self.arp_rep[side],
                self.nd_ns[side],
                self.nd_na[side],
                self.nd_rs[side],
                self.mld[side],
                self.tcp[side],
                self.tcp_payload[side],
                self.sack_blocks[side],
                self.rst[side],
                self.max_win_field[side],
                (self.max_win_field[side] as u64) << shift
            );
        }
        s + "}"
    }
}
