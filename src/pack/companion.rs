//! Companion arrays as typed, memory-mapped views: the family the scan found
//! ([`crate::pack::families`] decides what lines up), its files mapped, its rows addressed by the
//! pack's global row index, and its values decoded when the dtype is plain numbers.

use crate::error::{Context, Result, fail};
use memmap2::{Mmap, MmapOptions};
use std::sync::Arc;

use crate::pack::lazy::{self, LazyFile};

use crate::format::dtype::{Dtype, Field};
use crate::pack::families::Family;

use super::{Pack, shards};

/// A companion array of a pack (`embeddings-00000.npy` … beside the shards), its files
/// memory-mapped: row `i` belongs to the pack's row `i`.
///
/// ```
/// # fn main() -> dataset_packer::Result<()> {
/// # let fixture = dataset_packer::pack::doc_support::fixture_pack_with_companion()?;
/// let pack = dataset_packer::Pack::open(fixture.path())?;
/// let score = pack.companion("score")?;
/// for (i, step) in pack.steps().enumerate().take(3) {
///     let value: Vec<f32> = score.values(i as u64)?;
///     println!("run {} step {}: {value:?}", step.run_id(), step.step_index());
/// }
/// # Ok(()) }
/// ```
pub struct Companion<'a> {
    pack: &'a Pack,
    family: &'a Family,
    dtype: &'a Dtype,
    /// Each file's data section, in shard order (None for a file of no rows).
    maps: Vec<Option<Mmap>>,
    /// For a remote pack's files read block by block, what fills each before it is read.
    lazy: Vec<Option<Arc<LazyFile>>>,
}

impl<'a> Companion<'a> {
    pub(super) fn open(pack: &'a Pack, family: &'a Family) -> Result<Companion<'a>> {
        let maps = family
            .files
            .iter()
            .map(|f| {
                let bytes = f.header.rows() * family.row_bytes as u64;
                if bytes == 0 {
                    return Ok(None);
                }
                // SAFETY: as for the shards: the file was opened with the pack, its size
                // checked against its header then, and files of a pack are replaced by
                // rename, never rewritten in place.
                let map = unsafe {
                    MmapOptions::new()
                        .offset(f.header.data_offset as u64)
                        .len(bytes as usize)
                        .map(&*f.file)
                }
                .with_context(|| format!("mapping {}", f.path.display()))?;
                // Read as the steps rows are: by index, or a run's range at a time.
                shards::advise(&map, shards::Access::Random);
                Ok(Some(map))
            })
            .collect::<Result<Vec<_>>>()?;
        let lazy = family
            .files
            .iter()
            .map(|f| lazy::for_path(&f.path))
            .collect();
        Ok(Companion {
            lazy,
            pack,
            family,
            dtype: family.header_dtype(),
            maps,
        })
    }

    /// The family's name (`embeddings` for `embeddings-00000.npy`).
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack_with_companion()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// assert_eq!(pack.companion("score")?.name(), "score");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.family.name
    }

    /// The dtype's `descr` as the files' headers write it (a Python literal: `'<f4'`,
    /// `[('a', '<i8'), ('b', '<f4')]`).
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack_with_companion()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// assert_eq!(pack.companion("score")?.descr(), "'<f4'");
    /// # Ok(()) }
    /// ```
    pub fn descr(&self) -> &str {
        &self.family.descr
    }

    /// The shape of one row (the array's shape after its first axis; empty for one value
    /// per row).
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack_with_companion()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// assert!(pack.companion("score")?.shape().is_empty());
    /// # Ok(()) }
    /// ```
    pub fn shape(&self) -> &[u64] {
        &self.family.trailing
    }

    /// Bytes per row.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack_with_companion()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// assert_eq!(pack.companion("score")?.row_bytes(), 4);
    /// # Ok(()) }
    /// ```
    pub fn row_bytes(&self) -> usize {
        self.family.row_bytes
    }

    /// Rows: always the pack's.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack_with_companion()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// assert_eq!(pack.companion("score")?.len(), pack.len());
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> u64 {
        self.pack.len()
    }

    /// Whether the array has no rows (the pack has none).
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack_with_companion()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// assert!(!pack.companion("score")?.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The data section of file `shard` (the one beside the pack's shard `shard`), as the
    /// file holds it.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack_with_companion()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// let score = pack.companion("score")?;
    /// assert_eq!(score.shard_bytes(0)?.len() as u64, 4 * pack.len());
    /// # Ok(()) }
    /// ```
    pub fn shard_bytes(&self, shard: usize) -> Result<&[u8]> {
        let bytes = self.mapped(shard)?;
        self.ensure(shard, 0, bytes.len())?;
        if let Some(Some(map)) = self.maps.get(shard) {
            // Handed out whole, to be read whole: asked for at once (the map is read at
            // random otherwise, as `row` does).
            shards::will_need(map, 0, map.len());
        }
        Ok(bytes)
    }

    /// Shard `shard`'s bytes as mapped.
    fn mapped(&self, shard: usize) -> Result<&[u8]> {
        match self.maps.get(shard) {
            Some(map) => Ok(map.as_deref().unwrap_or(&[])),
            None => fail!(
                Corrupt,
                "{}: companion {} has {} files, there is no file {shard}",
                self.pack.path().display(),
                self.name(),
                self.maps.len()
            ),
        }
    }

    /// The bytes of the row of global index `index` (the pack's row `index`).
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack_with_companion()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// let score = pack.companion("score")?;
    /// let row = score.row(7)?;
    /// assert_eq!(f32::from_le_bytes(row.try_into().expect("a 4-byte row")), 7.0);
    /// # Ok(()) }
    /// ```
    pub fn row(&self, index: u64) -> Result<&[u8]> {
        if index >= self.len() {
            fail!(
                InvalidInput,
                "row {index} is past the end of companion {} of {} ({} rows)",
                self.name(),
                self.pack.path().display(),
                self.len()
            );
        }
        let starts = self.pack.starts();
        let shard = starts.partition_point(|&s| s <= index) - 1;
        let at = (index - starts[shard]) as usize * self.row_bytes();
        let bytes = &self.mapped(shard)?[at..at + self.row_bytes()];
        self.ensure(shard, at, bytes.len())?;
        Ok(bytes)
    }

    /// Makes sure bytes `at..at + len` of shard `shard`'s data section are there to read (see
    /// [`crate::pack::lazy`]).
    fn ensure(&self, shard: usize, at: usize, len: usize) -> Result<()> {
        match self.lazy.get(shard) {
            Some(Some(lazy)) => {
                let offset = self.family.files[shard].header.data_offset as u64;
                lazy.ensure(offset + at as u64, len as u64)
            }
            _ => Ok(()),
        }
    }

    /// The values of row `index`, decoded as `T`: for a dtype of plain numbers (`'<f4'`,
    /// `'<i8'`, `'|u1'` …, any row shape) whose kind and size are `T`'s; every value of the
    /// row in C order.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack_with_companion()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// let score = pack.companion("score")?;
    /// assert_eq!(score.values::<f32>(9)?, [9.0]);
    /// assert!(score.values::<i32>(9).is_err()); // '<f4' is not an i32
    /// # Ok(()) }
    /// ```
    pub fn values<T: CompanionValue>(&self, index: u64) -> Result<Vec<T>> {
        let row = self.row(index)?;
        self.check_scalar::<T>(self.dtype, self.descr())?;
        Ok(decode(row))
    }

    /// The names of the fields of a structured dtype, in order (empty for plain numbers).
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack_with_companion()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// assert!(pack.companion("score")?.field_names().is_empty());
    /// # Ok(()) }
    /// ```
    pub fn field_names(&self) -> Vec<&str> {
        match self.dtype {
            Dtype::Struct { fields, .. } => fields
                .iter()
                .filter(|f| !f.name.is_empty())
                .map(|f| f.name.as_str())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The values of field `name` in row `index` of a structured dtype, decoded as `T` (a
    /// field of plain numbers, or a sub-array of them). Rows whose shape is not `()` hold
    /// several items: the field's values of each, in order.
    ///
    /// ```
    /// # fn main() -> dataset_packer::Result<()> {
    /// # let fixture = dataset_packer::pack::doc_support::fixture_pack_with_companion()?;
    /// let pack = dataset_packer::Pack::open(fixture.path())?;
    /// // "score" is plain '<f4', so it has no fields.
    /// assert!(pack.companion("score")?.field_values::<f32>(0, "x").is_err());
    /// # Ok(()) }
    /// ```
    pub fn field_values<T: CompanionValue>(&self, index: u64, name: &str) -> Result<Vec<T>> {
        let Dtype::Struct { fields, size } = self.dtype else {
            fail!(
                InvalidInput,
                "companion {} has dtype {}, which has no fields",
                self.name(),
                self.descr()
            );
        };
        let Some(field) = fields.iter().find(|f| f.name == name && !name.is_empty()) else {
            fail!(
                InvalidInput,
                "companion {} has no field {name:?} (its fields: {})",
                self.name(),
                self.field_names().join(", ")
            );
        };
        self.check_scalar::<T>(&field.dtype, &format!("field {name:?}"))?;
        let row = self.row(index)?;
        Ok(row
            .chunks_exact(*size)
            .flat_map(|item| decode::<T>(field_bytes(item, field)))
            .collect())
    }

    /// Fails unless `dtype` is plain numbers of `T`'s kind and size, little-endian.
    fn check_scalar<T: CompanionValue>(&self, dtype: &Dtype, what: &str) -> Result<()> {
        let scalar = match dtype {
            Dtype::Array(inner, _) => inner.as_ref(),
            other => other,
        };
        let little = |order: char, size: usize| {
            order == '<' || size == 1 || (order == '=' && cfg!(target_endian = "little"))
        };
        match scalar {
            Dtype::Scalar { order, kind, size }
                if *kind == T::KIND && *size == T::SIZE && little(*order, *size) =>
            {
                Ok(())
            }
            _ => fail!(
                InvalidInput,
                "companion {}: {what} is {}, not {} values",
                self.name(),
                self.descr(),
                T::NAME
            ),
        }
    }
}

fn field_bytes<'b>(item: &'b [u8], field: &Field) -> &'b [u8] {
    &item[field.offset..field.offset + field.dtype.size()]
}

fn decode<T: CompanionValue>(bytes: &[u8]) -> Vec<T> {
    bytes.chunks_exact(T::SIZE).map(T::from_le).collect()
}

impl std::fmt::Debug for Companion<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Companion")
            .field("name", &self.name())
            .field("descr", &self.descr())
            .field("shape", &self.shape())
            .finish()
    }
}

/// A number type a companion's values decode to: `f32`, `f64`, `i8`…`i64`, `u8`…`u64`.
///
/// ```
/// use dataset_packer::CompanionValue;
/// fn size_of_value<T: CompanionValue>() -> usize { T::SIZE }
/// assert_eq!(size_of_value::<f64>(), 8);
/// ```
pub trait CompanionValue: Copy + private::Sealed {
    /// The NumPy kind letter (`f`, `i`, `u`).
    const KIND: char;
    /// Bytes per value.
    const SIZE: usize;
    /// The Rust name, for messages.
    const NAME: &'static str;
    /// Decodes `SIZE` little-endian bytes.
    ///
    /// ```
    /// use dataset_packer::CompanionValue;
    /// assert_eq!(<i16 as CompanionValue>::from_le(&[0xfe, 0xff]), -2);
    /// assert_eq!((f32::KIND, f32::SIZE, f32::NAME), ('f', 4, "f32"));
    /// ```
    fn from_le(bytes: &[u8]) -> Self;
}

mod private {
    pub trait Sealed {}
}

macro_rules! companion_value {
    ($($t:ty => $kind:literal),*) => {$(
        impl private::Sealed for $t {}
        impl CompanionValue for $t {
            const KIND: char = $kind;
            const SIZE: usize = std::mem::size_of::<$t>();
            const NAME: &'static str = stringify!($t);
            fn from_le(bytes: &[u8]) -> $t {
                <$t>::from_le_bytes(bytes.try_into().expect("SIZE bytes"))
            }
        }
    )*};
}

companion_value!(f32 => 'f', f64 => 'f', i8 => 'i', i16 => 'i', i32 => 'i', i64 => 'i',
    u8 => 'u', u16 => 'u', u32 => 'u', u64 => 'u');
