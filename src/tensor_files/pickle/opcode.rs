//! The pickle opcodes of protocols 0 to 5, one [`OpCode`] variant each, named as Python's
//! `pickletools` names them (`BININT1` is [`OpCode::BinInt1`]).

/// Declares [`OpCode`] with its bytes, and reading one from a byte.
macro_rules! opcodes {
    ($($(#[$doc:meta])* $name:ident = $byte:literal,)*) => {
        /// One pickle opcode.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(u8)]
        pub(super) enum OpCode {
            $($(#[$doc])* $name = $byte,)*
        }

        impl TryFrom<u8> for OpCode {
            type Error = UnknownOpCode;

            fn try_from(byte: u8) -> Result<OpCode, UnknownOpCode> {
                match byte {
                    $($byte => Ok(OpCode::$name),)*
                    other => Err(UnknownOpCode(other)),
                }
            }
        }
    };
}

opcodes! {
    /// `(`: pushes a mark.
    Mark = b'(',
    /// `.`: the end; the top of the stack is the result.
    Stop = b'.',
    /// `0`: discards the top of the stack.
    Pop = b'0',
    /// `1`: discards everything above the last mark, and the mark.
    PopMark = b'1',
    /// `2`: pushes the top of the stack again.
    Dup = b'2',
    /// `F`: a float as text.
    Float = b'F',
    /// `I`: an integer (or `00`/`01`, a bool) as text.
    Int = b'I',
    /// `J`: a 4-byte signed integer.
    BinInt = b'J',
    /// `K`: a 1-byte unsigned integer.
    BinInt1 = b'K',
    /// `L`: a long integer as text.
    Long = b'L',
    /// `M`: a 2-byte unsigned integer.
    BinInt2 = b'M',
    /// `N`: None.
    None = b'N',
    /// `P`: a persistent id as text.
    PersId = b'P',
    /// `Q`: a persistent id from the stack.
    BinPersId = b'Q',
    /// `R`: calls a callable with an argument tuple.
    Reduce = b'R',
    /// `S`: a string as quoted text.
    String = b'S',
    /// `T`: a string of a 4-byte length.
    BinString = b'T',
    /// `U`: a string of a 1-byte length.
    ShortBinString = b'U',
    /// `V`: a unicode string as text.
    Unicode = b'V',
    /// `X`: UTF-8 of a 4-byte length.
    BinUnicode = b'X',
    /// `a`: appends to a list.
    Append = b'a',
    /// `b`: sets an object's state.
    Build = b'b',
    /// `c`: a module's global, as two lines of text.
    Global = b'c',
    /// `d`: a dict of the items above the mark.
    Dict = b'd',
    /// `}`: an empty dict.
    EmptyDict = b'}',
    /// `e`: appends the items above the mark to a list.
    Appends = b'e',
    /// `g`: pushes a memo entry, its key as text.
    Get = b'g',
    /// `h`: pushes a memo entry, its key 1 byte.
    BinGet = b'h',
    /// `i`: builds an instance of a class named as text, from the items above the mark.
    Inst = b'i',
    /// `j`: pushes a memo entry, its key 4 bytes.
    LongBinGet = b'j',
    /// `l`: a list of the items above the mark.
    List = b'l',
    /// `]`: an empty list.
    EmptyList = b']',
    /// `o`: builds an instance of the class first above the mark, from the rest.
    Obj = b'o',
    /// `p`: stores the top of the stack in the memo, its key as text.
    Put = b'p',
    /// `q`: stores the top of the stack in the memo, its key 1 byte.
    BinPut = b'q',
    /// `r`: stores the top of the stack in the memo, its key 4 bytes.
    LongBinPut = b'r',
    /// `s`: adds a key and value to a dict.
    SetItem = b's',
    /// `t`: a tuple of the items above the mark.
    Tuple = b't',
    /// `)`: an empty tuple.
    EmptyTuple = b')',
    /// `u`: adds the key-value pairs above the mark to a dict.
    SetItems = b'u',
    /// `G`: an 8-byte big-endian float.
    BinFloat = b'G',
    /// The protocol version (2 and later).
    Proto = 0x80,
    /// Calls a class's `__new__` with an argument tuple.
    NewObj = 0x81,
    /// An extension registry code of 1 byte.
    Ext1 = 0x82,
    /// An extension registry code of 2 bytes.
    Ext2 = 0x83,
    /// An extension registry code of 4 bytes.
    Ext4 = 0x84,
    /// A tuple of the top item.
    Tuple1 = 0x85,
    /// A tuple of the top two items.
    Tuple2 = 0x86,
    /// A tuple of the top three items.
    Tuple3 = 0x87,
    /// True.
    NewTrue = 0x88,
    /// False.
    NewFalse = 0x89,
    /// A little-endian integer of a 1-byte length.
    Long1 = 0x8a,
    /// A little-endian integer of a 4-byte length.
    Long4 = 0x8b,
    /// UTF-8 of a 1-byte length.
    ShortBinUnicode = 0x8c,
    /// UTF-8 of an 8-byte length.
    BinUnicode8 = 0x8d,
    /// Bytes of an 8-byte length.
    BinBytes8 = 0x8e,
    /// An empty set.
    EmptySet = 0x8f,
    /// Adds the items above the mark to a set.
    AddItems = 0x90,
    /// A frozenset of the items above the mark.
    FrozenSet = 0x91,
    /// Calls a class's `__new__` with arguments and keyword arguments.
    NewObjEx = 0x92,
    /// A module's global, both names from the stack.
    StackGlobal = 0x93,
    /// Stores the top of the stack in the memo under the next key.
    Memoize = 0x94,
    /// A frame of an 8-byte length (protocol 4 and later).
    Frame = 0x95,
    /// A bytearray of an 8-byte length.
    ByteArray8 = 0x96,
    /// An out-of-band buffer.
    NextBuffer = 0x97,
    /// Makes the top of the stack a read-only buffer.
    ReadonlyBuffer = 0x98,
    /// `B`: bytes of a 4-byte length.
    BinBytes = b'B',
    /// `C`: bytes of a 1-byte length.
    ShortBinBytes = b'C',
}

/// A byte that is no pickle opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct UnknownOpCode(pub u8);

impl std::fmt::Display for UnknownOpCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "0x{:02x} is not a pickle opcode", self.0)
    }
}

impl std::error::Error for UnknownOpCode {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_opcode_comes_back_from_its_byte_and_other_bytes_are_named() {
        let mut known = 0;
        for byte in 0..=u8::MAX {
            match OpCode::try_from(byte) {
                Ok(op) => {
                    assert_eq!(op as u8, byte);
                    known += 1;
                }
                Err(e) => assert_eq!(
                    e.to_string(),
                    format!("0x{byte:02x} is not a pickle opcode")
                ),
            }
        }
        assert_eq!(known, 68);
    }
}
