//! The board codec: 16 tile exponents ↔ the packed `board` + `tile_65536_mask` columns, plus the
//! two values derived from a board at pack time: `board_eval` (Macroxue line heuristic) and
//! `ev_legal` (which moves change the board under 2048 rules).

/// Largest exponent a pack can represent (65536 = 2^16).
pub const MAX_EXPONENT: u8 = 16;

/// Move directions in column order: 0=up 1=down 2=left 3=right.
pub const MOVE_NAMES: [&str; 4] = ["up", "down", "left", "right"];

/// Packs 16 exponents (each ≤ 16) into the MSB-first nibble board and the 65536 mask, eight
/// cells per word operation (the same result as [`pack_cell_by_cell`]).
pub fn pack(cells: &[u8; 16]) -> (u64, u16) {
    debug_assert!(cells.iter().all(|&e| e <= MAX_EXPONENT));
    let half = |h: usize| {
        // Cell 8h first, in the most significant byte. Only 16 has bit 4 set (cells ≤ 16):
        // those bytes lose 1 to read 15, without a borrow from the byte above.
        let bytes = u64::from_be_bytes(cells[8 * h..8 * h + 8].try_into().unwrap());
        let sixteens = (bytes >> 4) & 0x0101_0101_0101_0101;
        let mut x = bytes - sixteens;
        // Pairs of bytes → bytes of two nibbles → 16 → 32 bits, the first cell highest.
        x = (x | x >> 4) & 0x00ff_00ff_00ff_00ff;
        x = (x | x >> 8) & 0x0000_ffff_0000_ffff;
        x = (x | x >> 16) & 0xffff_ffff;
        // Mask bit 8h + i for cell 8h + i: gather the 0/1 bytes, the last cell first.
        let mask = (sixteens.wrapping_mul(0x0102_0408_1020_4080) >> 56) as u8;
        (x, mask.reverse_bits())
    };
    let (high, high_mask) = half(0);
    let (low, low_mask) = half(1);
    (
        high << 32 | low,
        u16::from(low_mask) << 8 | u16::from(high_mask),
    )
}

/// [`pack`], one cell at a time: the definition it is tested against.
pub fn pack_cell_by_cell(cells: &[u8; 16]) -> (u64, u16) {
    let mut board = 0u64;
    let mut mask = 0u16;
    for (i, &e) in cells.iter().enumerate() {
        debug_assert!(e <= MAX_EXPONENT);
        let nibble = if e >= 16 {
            mask |= 1 << i;
            15
        } else {
            e
        };
        board |= u64::from(nibble) << (60 - 4 * i);
    }
    (board, mask)
}

/// Decodes the packed columns back to exponents; a masked cell is 16 whatever its nibble.
pub fn unpack(board: u64, mask: u16) -> [u8; 16] {
    let mut cells = [0u8; 16];
    for (i, cell) in cells.iter_mut().enumerate() {
        *cell = if mask & (1 << i) != 0 {
            16
        } else {
            ((board >> (60 - 4 * i)) & 0xf) as u8
        };
    }
    cells
}

/// The largest exponent on the board.
pub fn max_rank(cells: &[u8; 16]) -> u8 {
    cells.iter().copied().max().unwrap_or(0)
}

/// The four lines of a direction's slide, each listed from the edge the tiles slide toward.
/// Legality of a slide only depends on the order, so rows/columns are read in both orders.
const ROWS: [[usize; 4]; 4] = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]];
const COLS: [[usize; 4]; 4] = [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]];

fn line(cells: &[u8; 16], idx: &[usize; 4]) -> [u8; 4] {
    [cells[idx[0]], cells[idx[1]], cells[idx[2]], cells[idx[3]]]
}

/// Does sliding this line toward its index-0 end change it?
/// It does iff an empty cell is followed by a tile, or two equal tiles are adjacent
/// (with no gap before a tile, the tiles are already compacted, so adjacency is enough).
fn slide_changes(l: [u8; 4]) -> bool {
    (0..3).any(|i| (l[i] == 0 && l[i + 1] != 0) || (l[i] != 0 && l[i] == l[i + 1]))
}

fn reversed(l: [u8; 4]) -> [u8; 4] {
    [l[3], l[2], l[1], l[0]]
}

/// `ev_legal` bits: bit0 up, bit1 down, bit2 left, bit3 right.
pub fn legal_moves(cells: &[u8; 16]) -> u8 {
    let mut bits = 0u8;
    for c in &COLS {
        let l = line(cells, c);
        if slide_changes(l) {
            bits |= 1;
        }
        if slide_changes(reversed(l)) {
            bits |= 2;
        }
    }
    for r in &ROWS {
        let l = line(cells, r);
        if slide_changes(l) {
            bits |= 4;
        }
        if slide_changes(reversed(l)) {
            bits |= 8;
        }
    }
    bits
}

/// The points move `dir` (0 up, 1 down, 2 left, 3 right) scores on a board of exponents: the
/// sum of the tiles its merges make, the game's own score rule. 0 for an illegal move or a
/// `dir` that is not a move.
///
/// ```
/// use dataset_packer::format::board::move_score;
/// let mut cells = [0u8; 16];
/// cells[..4].copy_from_slice(&[1, 1, 2, 2]); // 2 2 4 4 on the top row
/// assert_eq!(move_score(&cells, 2), 4 + 8); // left: 2+2 → 4, 4+4 → 8
/// assert_eq!(move_score(&cells, 0), 0); // up moves nothing
/// ```
pub fn move_score(cells: &[u8; 16], dir: u8) -> u64 {
    let (lines, reverse) = match dir {
        0 => (&COLS, false),
        1 => (&COLS, true),
        2 => (&ROWS, false),
        3 => (&ROWS, true),
        _ => return 0,
    };
    lines
        .iter()
        .map(|idx| {
            let l = line(cells, idx);
            line_merge_score(if reverse { reversed(l) } else { l })
        })
        .sum()
}

/// What sliding one line towards its first cell scores: its tiles, gaps closed, merge in
/// pairs from that end, each pair once.
fn line_merge_score(l: [u8; 4]) -> u64 {
    let tiles: Vec<u8> = l.into_iter().filter(|&e| e != 0).collect();
    let (mut score, mut i) = (0u64, 0);
    while i + 1 < tiles.len() {
        if tiles[i] == tiles[i + 1] {
            score += 1u64 << (tiles[i] + 1);
            i += 2;
        } else {
            i += 1;
        }
    }
    score
}

fn tile_score(r: u8) -> i32 {
    i32::from(r) << r
}

/// The Macroxue score of one line of four exponents (listed from the end tiles gather at).
pub fn line_eval(l: [u8; 4]) -> i32 {
    let mut score = tile_score(l[0]);
    for x in 0..3 {
        let a = tile_score(l[x]);
        let b = tile_score(l[x + 1]);
        if a >= b {
            score += a + b;
        } else {
            score += (a - b) * 12;
        }
        if a == b {
            score += a;
        }
    }
    score
}

/// `board_eval`: the line heuristic summed over rows (left→right) and columns (top→bottom).
pub fn board_eval(cells: &[u8; 16]) -> i32 {
    ROWS.iter()
        .chain(COLS.iter())
        .map(|idx| line_eval(line(cells, idx)))
        .sum()
}

/// Precomputed per-line answers for lines without a 65536 tile: the 16-bit key is the four
/// nibbles of a line. Nearly every row hits this table; boards with a 65536 tile take the
/// direct path.
pub struct LineTables {
    /// Indexed by a u16 key, so a lookup needs no bounds check: the line's eval times 4, plus
    /// in the low two bits, bit0: sliding toward index 0 changes the line; bit1: sliding toward
    /// index 3 does. One load per line gives both.
    lines: Box<[i32; 1 << 16]>,
}

/// A line's eval is within ±2^28 (four 15s: about ±2^25), so four times it fits an i32.
const EVAL_LIMIT: i32 = 1 << 28;

impl LineTables {
    pub fn new() -> LineTables {
        let mut lines = Vec::with_capacity(1 << 16);
        for key in 0..=u16::MAX {
            let l = [
                (key >> 12) as u8 & 0xf,
                (key >> 8) as u8 & 0xf,
                (key >> 4) as u8 & 0xf,
                key as u8 & 0xf,
            ];
            let eval = line_eval(l);
            assert!(eval.abs() < EVAL_LIMIT, "line {l:?} evaluates to {eval}");
            let slides = i32::from(slide_changes(l)) | i32::from(slide_changes(reversed(l))) << 1;
            lines.push(eval << 2 | slides);
        }
        LineTables {
            lines: lines
                .into_boxed_slice()
                .try_into()
                .expect("one entry per key"),
        }
    }

    /// `(board_eval, ev_legal)` of a board, via the tables when no cell is 65536.
    #[inline]
    pub fn eval_and_legal(&self, cells: &[u8; 16], board: u64, mask: u16) -> (i32, u8) {
        if mask != 0 {
            return (board_eval(cells), legal_moves(cells));
        }
        let mut eval = 0i32;
        let mut legal = 0u8;
        for r in 0..4 {
            let line = self.lines[(board >> (48 - 16 * r)) as u16 as usize];
            eval += line >> 2;
            legal |= ((line & 1) << 2 | (line >> 1 & 1) << 3) as u8;
        }
        let columns = transpose(board);
        for c in 0..4 {
            let line = self.lines[(columns >> (48 - 16 * c)) as u16 as usize];
            eval += line >> 2;
            legal |= (line & 3) as u8;
        }
        (eval, legal)
    }
}

impl Default for LineTables {
    fn default() -> Self {
        Self::new()
    }
}

/// The board with rows and columns swapped (cell 4r + c moves to 4c + r), so that its 16-bit
/// lines are the columns read top→bottom: nibbles exchanged across the diagonal in two swaps
/// (single nibbles within 2×2 blocks, then the off-diagonal 2×2 blocks).
fn transpose(board: u64) -> u64 {
    let mut b = board;
    let t = (b ^ (b >> 12)) & 0x0000_f0f0_0000_f0f0;
    b ^= t ^ (t << 12);
    let t = (b ^ (b >> 24)) & 0x0000_0000_ff00_ff00;
    b ^ t ^ (t << 24)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn move_score_merges_each_pair_once_from_the_gathering_end() {
        let board =
            |rows: [[u8; 4]; 4]| -> [u8; 16] { std::array::from_fn(|i| rows[i / 4][i % 4]) };
        // 2 2 2 2: left and right make two 4s.
        let b = board([[1, 1, 1, 1], [0; 4], [0; 4], [0; 4]]);
        assert_eq!((move_score(&b, 2), move_score(&b, 3)), (8, 8));
        assert_eq!((move_score(&b, 0), move_score(&b, 1)), (0, 0));
        // 4 . 4 4: left merges the first two 4s (8), right the last two (8), once each.
        let b = board([[2, 0, 2, 2], [0; 4], [0; 4], [0; 4]]);
        assert_eq!((move_score(&b, 2), move_score(&b, 3)), (8, 8));
        // A column of 2 4 4 8: up and down both merge the 4s only.
        let b = board([[1, 0, 0, 0], [2, 0, 0, 0], [2, 0, 0, 0], [3, 0, 0, 0]]);
        assert_eq!((move_score(&b, 0), move_score(&b, 1)), (8, 8));
        // 32768 + 32768 → 65536, the largest tile a board holds.
        let b = board([[15, 15, 0, 0], [0; 4], [0; 4], [0; 4]]);
        assert_eq!(move_score(&b, 2), 65536);
        assert_eq!(move_score(&b, 4), 0);
    }

    fn cells(v: &[u8]) -> [u8; 16] {
        let mut c = [0u8; 16];
        c[..v.len()].copy_from_slice(v);
        c
    }

    #[test]
    fn board_eval_matches_the_spec_vectors() {
        assert_eq!(board_eval(&[0; 16]), 0);
        assert_eq!(board_eval(&cells(&[1])), 8);
        assert_eq!(board_eval(&cells(&[1, 1])), 18);
        let b = [15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0];
        assert_eq!(board_eval(&b), 3618726);
    }

    #[test]
    fn pack_is_msb_first_with_65536_mask() {
        let mut c = [0u8; 16];
        c[0] = 1;
        c[15] = 16;
        let (board, mask) = pack(&c);
        assert_eq!(board, 0x1000_0000_0000_000f);
        assert_eq!(mask, 1 << 15);
        assert_eq!(unpack(board, mask), c);
    }

    #[test]
    fn word_packing_equals_cell_by_cell() {
        let mut rng = crate::rng::Xoshiro::new(0x0bad_c0de_2048_0016);
        for round in 0..50_000 {
            let r = rng.next_u64();
            let mut c = [0u8; 16];
            for (i, cell) in c.iter_mut().enumerate() {
                // Mostly small exponents, 16 (the masked case) and 15 often enough.
                let pick = ((r >> (4 * i)) & 0xf) as u8;
                *cell = match round % 3 {
                    0 => pick,
                    1 => [0, 15, 16, 1][pick as usize % 4],
                    _ => pick % 2 * 16,
                };
            }
            assert_eq!(pack(&c), pack_cell_by_cell(&c), "{c:?}");
        }
        assert_eq!(pack(&[16; 16]), (u64::MAX, u16::MAX));
        let b = 0x0123_4567_89ab_cdef;
        assert_eq!(transpose(b), 0x048c_159d_26ae_37bf);
    }

    #[test]
    fn legality_follows_2048_rules() {
        // One tile in the top-left corner: only down and right move it.
        assert_eq!(legal_moves(&cells(&[1])), 0b1010);
        // A full board without equal neighbours: nothing is legal.
        let stuck = [1, 2, 1, 2, 2, 1, 2, 1, 1, 2, 1, 2, 2, 1, 2, 1];
        assert_eq!(legal_moves(&stuck), 0);
        // 65536 next to 32768 must not merge even though both nibbles are 15.
        let mut b = stuck;
        b[0] = 16;
        b[1] = 15;
        assert_eq!(legal_moves(&b), 0);
    }

    #[test]
    fn tables_agree_with_direct_computation() {
        let t = LineTables::new();
        let mut rng = crate::rng::Xoshiro::new(0x9e37_79b9_7f4a_7c15);
        for _ in 0..20_000 {
            let state = rng.next_u64();
            let mut c = [0u8; 16];
            for (i, cell) in c.iter_mut().enumerate() {
                let v = ((state >> (i * 4)) & 0xf) as u8;
                *cell = if v > 11 { 0 } else { v % 4 };
            }
            let (board, mask) = pack(&c);
            assert_eq!(
                t.eval_and_legal(&c, board, mask),
                (board_eval(&c), legal_moves(&c))
            );
        }
    }
}
