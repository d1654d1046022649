//! Companion arrays as Parquet columns: a NumPy dtype (and trailing shape) becomes an Arrow
//! type (numbers as themselves, booleans as booleans, fixed-size bytes as fixed-size binary,
//! unicode as strings, datetimes as int64, a trailing shape as nested fixed-size lists, a
//! structured dtype as a struct of its named fields), and rows of such an array become an
//! Arrow array of that type.

use std::sync::Arc;

use crate::error::{Result, err, fail};
use arrow_array::types::{
    Float16Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type,
    UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{
    ArrayRef, ArrowPrimitiveType, BooleanArray, FixedSizeBinaryArray, FixedSizeListArray,
    PrimitiveArray, StringArray, StructArray,
};
use arrow_buffer::{Buffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Fields};

use crate::format::dtype::Dtype;

/// The Arrow type of one row of an array of `dtype` with `trailing` shape.
pub fn arrow_type(dtype: &Dtype, trailing: &[u64]) -> Result<DataType> {
    let mut t = item_type(dtype)?;
    for &n in trailing.iter().rev() {
        t = DataType::FixedSizeList(Arc::new(Field::new("item", t, false)), list_len(n)?);
    }
    Ok(t)
}

fn list_len(n: u64) -> Result<i32> {
    i32::try_from(n).map_err(|_| err!(Unsupported, "a dimension of {n} is too long for Parquet"))
}

fn item_type(dtype: &Dtype) -> Result<DataType> {
    Ok(match dtype {
        Dtype::Scalar { order, kind, size } => {
            if *order == '>' && *size > 1 && !matches!(kind, 'S' | 'V') {
                fail!(
                    Unsupported,
                    "big-endian dtypes are not converted; save the array little-endian"
                );
            }
            match (kind, size) {
                ('b', 1) => DataType::Boolean,
                ('i', 1) => DataType::Int8,
                ('i', 2) => DataType::Int16,
                ('i', 4) => DataType::Int32,
                ('i', 8) => DataType::Int64,
                ('u', 1) => DataType::UInt8,
                ('u', 2) => DataType::UInt16,
                ('u', 4) => DataType::UInt32,
                ('u', 8) => DataType::UInt64,
                ('f', 2) => DataType::Float16,
                ('f', 4) => DataType::Float32,
                ('f', 8) => DataType::Float64,
                ('m' | 'M', 8) => DataType::Int64,
                ('S' | 'V' | 'a', n) => DataType::FixedSizeBinary(list_len(*n as u64)?),
                ('U', _) => DataType::Utf8,
                _ => fail!(
                    Unsupported,
                    "dtype kind '{kind}' of {size} bytes has no Parquet column type"
                ),
            }
        }
        Dtype::Array(inner, shape) => arrow_type(inner, shape)?,
        Dtype::Struct { fields, .. } => DataType::Struct(struct_fields(fields)?),
    })
}

/// The named fields of a structured dtype (padding, unnamed, left out).
fn struct_fields(fields: &[crate::format::dtype::Field]) -> Result<Fields> {
    fields
        .iter()
        .filter(|f| !f.name.is_empty())
        .map(|f| Ok(Field::new(&f.name, item_type(&f.dtype)?, false)))
        .collect::<Result<Vec<_>>>()
        .map(Fields::from)
}

/// `count` rows of an array of `dtype` with `trailing` shape, from their bytes.
pub fn rows_to_array(
    dtype: &Dtype,
    trailing: &[u64],
    bytes: &[u8],
    count: usize,
) -> Result<ArrayRef> {
    let items = trailing.iter().product::<u64>() as usize * count;
    let mut array = items_to_array(dtype, bytes, items)?;
    let mut outer = items;
    for &n in trailing.iter().rev() {
        let n = list_len(n)?;
        outer /= n.max(1) as usize;
        let field = Arc::new(Field::new("item", array.data_type().clone(), false));
        array = Arc::new(FixedSizeListArray::try_new(field, n, array, None)?);
        debug_assert_eq!(array.len(), outer);
    }
    Ok(array)
}

/// `count` items of `dtype`, back to back in `bytes`.
fn items_to_array(dtype: &Dtype, bytes: &[u8], count: usize) -> Result<ArrayRef> {
    debug_assert_eq!(bytes.len(), count * dtype.size());
    Ok(match dtype {
        Dtype::Scalar { kind, size, .. } => scalars(*kind, *size, bytes, count)?,
        Dtype::Array(inner, shape) => rows_to_array(inner, shape, bytes, count)?,
        Dtype::Struct { fields, size } => {
            let mut children = Vec::new();
            for f in fields.iter().filter(|f| !f.name.is_empty()) {
                let width = f.dtype.size();
                let mut gathered = Vec::with_capacity(width * count);
                for item in bytes.chunks_exact((*size).max(1)).take(count) {
                    gathered.extend_from_slice(&item[f.offset..f.offset + width]);
                }
                children.push(items_to_array(&f.dtype, &gathered, count)?);
            }
            Arc::new(StructArray::try_new(
                struct_fields(fields)?,
                children,
                None,
            )?)
        }
    })
}

fn scalars(kind: char, size: usize, bytes: &[u8], count: usize) -> Result<ArrayRef> {
    Ok(match (kind, size) {
        ('b', 1) => Arc::new(BooleanArray::from(
            bytes.iter().map(|&b| b != 0).collect::<Vec<_>>(),
        )),
        ('i', 1) => primitive::<Int8Type>(bytes, count),
        ('i', 2) => primitive::<Int16Type>(bytes, count),
        ('i', 4) => primitive::<Int32Type>(bytes, count),
        ('i', 8) | ('m' | 'M', 8) => primitive::<Int64Type>(bytes, count),
        ('u', 1) => primitive::<UInt8Type>(bytes, count),
        ('u', 2) => primitive::<UInt16Type>(bytes, count),
        ('u', 4) => primitive::<UInt32Type>(bytes, count),
        ('u', 8) => primitive::<UInt64Type>(bytes, count),
        ('f', 2) => primitive::<Float16Type>(bytes, count),
        ('f', 4) => primitive::<Float32Type>(bytes, count),
        ('f', 8) => primitive::<Float64Type>(bytes, count),
        ('S' | 'V' | 'a', n) => Arc::new(FixedSizeBinaryArray::try_new(
            list_len(n as u64)?,
            Buffer::from_slice_ref(bytes),
            None,
        )?),
        ('U', n) => Arc::new(StringArray::from(
            bytes
                .chunks_exact(n.max(1))
                .take(count)
                .map(utf32_text)
                .collect::<Vec<_>>(),
        )),
        _ => fail!(
            Unsupported,
            "dtype kind '{kind}' of {size} bytes has no Parquet column type"
        ),
    })
}

/// Little-endian values, copied into an aligned Arrow buffer.
fn primitive<T: ArrowPrimitiveType>(bytes: &[u8], count: usize) -> ArrayRef {
    let values = ScalarBuffer::<T::Native>::new(Buffer::from_slice_ref(bytes), 0, count);
    Arc::new(PrimitiveArray::<T>::new(values, None))
}

/// NumPy's fixed-width UTF-32LE text, its trailing NULs dropped.
fn utf32_text(item: &[u8]) -> String {
    item.chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .take_while(|&c| c != 0)
        .map(|c| char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::dtype::parse_literal;
    use arrow_array::Array;

    fn dtype(descr: &str) -> Dtype {
        Dtype::from_descr(&parse_literal(descr).unwrap()).unwrap()
    }

    #[test]
    fn floats_with_a_trailing_shape() {
        let bytes: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let a = rows_to_array(&dtype("'<f4'"), &[3], &bytes, 2).unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a.data_type(), &arrow_type(&dtype("'<f4'"), &[3]).unwrap());
        let list = a.as_any().downcast_ref::<FixedSizeListArray>().unwrap();
        let second = list.value(1);
        let v = second
            .as_any()
            .downcast_ref::<PrimitiveArray<Float32Type>>()
            .unwrap();
        assert_eq!(v.values().to_vec(), [3.0, 4.0, 5.0]);
    }

    #[test]
    fn structs_skip_padding() {
        let d = dtype("[('a', '<u2'), ('', '|V2'), ('b', '<i4', (2,))]");
        let mut bytes = Vec::new();
        for r in 0..3u16 {
            bytes.extend_from_slice(&r.to_le_bytes());
            bytes.extend_from_slice(&[0xee, 0xee]);
            bytes.extend_from_slice(&(i32::from(r) * 10).to_le_bytes());
            bytes.extend_from_slice(&(-i32::from(r)).to_le_bytes());
        }
        let a = rows_to_array(&d, &[], &bytes, 3).unwrap();
        let s = a.as_any().downcast_ref::<StructArray>().unwrap();
        assert_eq!(s.num_columns(), 2);
        let a_col = s
            .column(0)
            .as_any()
            .downcast_ref::<PrimitiveArray<UInt16Type>>()
            .unwrap();
        assert_eq!(a_col.values().to_vec(), [0, 1, 2]);
    }

    #[test]
    fn refuses_what_parquet_cannot_hold() {
        assert!(arrow_type(&dtype("'>f4'"), &[]).is_err());
        assert!(arrow_type(&dtype("'<c8'"), &[]).is_err());
        assert_eq!(arrow_type(&dtype("'<U3'"), &[]).unwrap(), DataType::Utf8);
    }
}
