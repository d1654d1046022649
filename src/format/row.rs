//! One pack row: the 48-byte aligned record of the spec (`STEP_ROW_DTYPE`), and its byte codec.
//! Also knows the legacy packed 46-byte layout an older tool wrote, so readers can convert it.

/// Bytes per row in the spec layout.
pub const ROW_BYTES: usize = 48;
/// Bytes per row of the legacy packed layout (same fields, no padding).
pub const LEGACY_ROW_BYTES: usize = 46;

/// Byte offsets of the columns inside a 48-byte row.
pub mod offset {
    pub const RUN_ID: usize = 0;
    pub const STEP_INDEX: usize = 4;
    pub const BOARD: usize = 8;
    pub const BOARD_EVAL: usize = 16;
    pub const TILE_65536_MASK: usize = 20;
    pub const MOVE_DIR: usize = 22;
    pub const VALUATION_TYPE: usize = 23;
    pub const EV_LEGAL: usize = 24;
    pub const MAX_RANK: usize = 25;
    pub const PADDING: usize = 26;
    pub const SEED: usize = 28;
    pub const BRANCH_EVS: usize = 32;
}

/// A decoded row. Field order and meaning follow the spec's `STEP_ROW_DTYPE`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StepRow {
    pub run_id: u32,
    pub step_index: u32,
    pub board: u64,
    pub board_eval: i32,
    pub tile_65536_mask: u16,
    pub move_dir: u8,
    pub valuation_type: u8,
    pub ev_legal: u8,
    pub max_rank: u8,
    pub seed: u32,
    pub branch_evs: [f32; 4],
}

impl StepRow {
    /// The row's 48 little-endian bytes, padding zeroed.
    pub fn to_bytes(&self) -> [u8; ROW_BYTES] {
        let mut b = [0u8; ROW_BYTES];
        b[0..4].copy_from_slice(&self.run_id.to_le_bytes());
        b[4..8].copy_from_slice(&self.step_index.to_le_bytes());
        b[8..16].copy_from_slice(&self.board.to_le_bytes());
        b[16..20].copy_from_slice(&self.board_eval.to_le_bytes());
        b[20..22].copy_from_slice(&self.tile_65536_mask.to_le_bytes());
        b[22] = self.move_dir;
        b[23] = self.valuation_type;
        b[24] = self.ev_legal;
        b[25] = self.max_rank;
        b[28..32].copy_from_slice(&self.seed.to_le_bytes());
        for (k, ev) in self.branch_evs.iter().enumerate() {
            b[32 + 4 * k..36 + 4 * k].copy_from_slice(&ev.to_le_bytes());
        }
        b
    }

    /// Decodes a 48-byte row (padding is not looked at; see [`padding_is_zero`]).
    pub fn from_bytes(b: &[u8]) -> StepRow {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        StepRow {
            run_id: u32_at(0),
            step_index: u32_at(4),
            board: u64::from_le_bytes(b[8..16].try_into().unwrap()),
            board_eval: u32_at(16) as i32,
            tile_65536_mask: u16::from_le_bytes([b[20], b[21]]),
            move_dir: b[22],
            valuation_type: b[23],
            ev_legal: b[24],
            max_rank: b[25],
            seed: u32_at(28),
            branch_evs: [
                f32::from_bits(u32_at(32)),
                f32::from_bits(u32_at(36)),
                f32::from_bits(u32_at(40)),
                f32::from_bits(u32_at(44)),
            ],
        }
    }
}

/// Whether the two padding bytes of a 48-byte row are zero, as writers must leave them.
pub fn padding_is_zero(row: &[u8]) -> bool {
    row[offset::PADDING] == 0 && row[offset::PADDING + 1] == 0
}

/// Converts one legacy packed 46-byte row into the 48-byte layout (padding zeroed).
/// The legacy layout is the spec's fields back to back: bytes 0..26 match, then the seed and
/// EVs follow at 26 instead of 28.
pub fn legacy_to_aligned(legacy: &[u8], out: &mut [u8]) {
    debug_assert_eq!(legacy.len(), LEGACY_ROW_BYTES);
    out[..26].copy_from_slice(&legacy[..26]);
    out[26] = 0;
    out[27] = 0;
    out[28..48].copy_from_slice(&legacy[26..46]);
}

/// Converts a buffer of legacy 46-byte rows into 48-byte rows.
pub fn legacy_rows_to_aligned(legacy: &[u8]) -> Vec<u8> {
    let rows = legacy.len() / LEGACY_ROW_BYTES;
    let mut out = vec![0u8; rows * ROW_BYTES];
    for (src, dst) in legacy
        .chunks_exact(LEGACY_ROW_BYTES)
        .zip(out.chunks_exact_mut(ROW_BYTES))
    {
        legacy_to_aligned(src, dst);
    }
    out
}

/// Sets every 48-byte row's `ev_legal` from its board, as the format defines it (a move is
/// legal when it changes the board), and returns how many rows it changed. Rows of the legacy
/// layout need it: the reference packer set a bit for every move that logged an EV, and the
/// rows it read logged 0.0 for illegal tuple moves.
pub fn recompute_ev_legal(rows: &mut [u8]) -> u64 {
    let mut changed = 0;
    for row in rows.chunks_exact_mut(ROW_BYTES) {
        let r = StepRow::from_bytes(row);
        let legal = super::board::legal_moves(&super::board::unpack(r.board, r.tile_65536_mask));
        changed += u64::from(row[offset::EV_LEGAL] != legal);
        row[offset::EV_LEGAL] = legal;
    }
    changed
}

/// Rewrites the `run_id` and `valuation_type` columns of every 48-byte row in `rows`:
/// `run_id` through `run_ids`, `valuation_type` through `valuations` (a full byte map) when given.
pub fn remap_rows(
    rows: &mut [u8],
    mut run_ids: impl FnMut(u32) -> u32,
    valuations: Option<&[u8; 256]>,
) {
    for row in rows.chunks_exact_mut(ROW_BYTES) {
        let id = u32::from_le_bytes(row[offset::RUN_ID..offset::RUN_ID + 4].try_into().unwrap());
        row[offset::RUN_ID..offset::RUN_ID + 4].copy_from_slice(&run_ids(id).to_le_bytes());
        if let Some(map) = valuations {
            row[offset::VALUATION_TYPE] = map[row[offset::VALUATION_TYPE] as usize];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_zeroes_padding() {
        let row = StepRow {
            run_id: 7,
            step_index: 9,
            board: 0x0123_4567_89ab_cdef,
            board_eval: -5,
            tile_65536_mask: 0x8001,
            move_dir: 3,
            valuation_type: 2,
            ev_legal: 0b1010,
            max_rank: 16,
            seed: 0xdead_beef,
            branch_evs: [1.5, -2.0, 0.0, 3.25],
        };
        let b = row.to_bytes();
        assert!(padding_is_zero(&b));
        assert_eq!(StepRow::from_bytes(&b), row);
        assert_eq!(&b[28..32], &0xdead_beefu32.to_le_bytes());
    }

    #[test]
    fn legacy_rows_convert() {
        let row = StepRow {
            seed: 42,
            branch_evs: [1.0, 2.0, 3.0, 4.0],
            max_rank: 5,
            ..Default::default()
        };
        let b = row.to_bytes();
        let mut legacy = Vec::new();
        legacy.extend_from_slice(&b[..26]);
        legacy.extend_from_slice(&b[28..]);
        let mut out = [0xffu8; 48];
        legacy_to_aligned(&legacy, &mut out);
        assert_eq!(out, b);
    }

    #[test]
    fn ev_legal_is_recomputed_from_the_board() {
        // Cell 0 = 2, the rest empty: up and left change nothing, down and right do.
        let (board, mask) =
            crate::format::board::pack(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let row = |ev_legal| StepRow {
            board,
            tile_65536_mask: mask,
            ev_legal,
            ..Default::default()
        };
        let mut rows = [row(0b1111).to_bytes(), row(0b1010).to_bytes()].concat();
        assert_eq!(recompute_ev_legal(&mut rows), 1);
        assert_eq!(rows[offset::EV_LEGAL], 0b1010);
        assert_eq!(rows[ROW_BYTES + offset::EV_LEGAL], 0b1010);
    }
}
