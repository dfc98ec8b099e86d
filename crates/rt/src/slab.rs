//! A small slab: stable indices with generations, reused through a free list. Tasks and
//! in-flight io_uring operations live in slabs so their index can ride in a waker or in an
//! SQE's user_data.

#[derive(Debug)]
enum Entry<T> {
    Occupied {
        generation: u32,
        value: T,
    },
    Vacant {
        generation: u32,
        next_free: Option<usize>,
    },
}

/// Key of a slab entry: index plus the generation that was current when it was inserted, so
/// a stale key (a late wake of a finished task) never reaches a newer occupant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub index: usize,
    pub generation: u32,
}

impl Key {
    /// Packs into a u64 (index in the low 32 bits).
    pub fn to_u64(self) -> u64 {
        debug_assert!(self.index <= u32::MAX as usize);
        (u64::from(self.generation) << 32) | self.index as u64
    }

    pub fn from_u64(v: u64) -> Key {
        Key {
            index: (v & 0xffff_ffff) as usize,
            generation: (v >> 32) as u32,
        }
    }
}

#[derive(Debug)]
pub struct Slab<T> {
    entries: Vec<Entry<T>>,
    free: Option<usize>,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            entries: Vec::new(),
            free: None,
            len: 0,
        }
    }
}

impl<T> Slab<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    /// The key the next `insert` returns.
    pub fn next_key(&self) -> Key {
        match self.free {
            Some(index) => {
                let Entry::Vacant { generation, .. } = self.entries[index] else {
                    unreachable!("free list points at an occupied entry");
                };
                Key {
                    index,
                    generation: generation.wrapping_add(1),
                }
            }
            None => Key {
                index: self.entries.len(),
                generation: 0,
            },
        }
    }

    pub fn insert(&mut self, value: T) -> Key {
        debug_assert!(
            self.len <= self.entries.len(),
            "occupied entries are entries"
        );
        self.len += 1;
        match self.free {
            Some(index) => {
                let Entry::Vacant {
                    generation,
                    next_free,
                } = self.entries[index]
                else {
                    unreachable!("free list points at an occupied entry");
                };
                let generation = generation.wrapping_add(1);
                self.free = next_free;
                self.entries[index] = Entry::Occupied { generation, value };
                Key { index, generation }
            }
            None => {
                let index = self.entries.len();
                assert!(index < u32::MAX as usize, "slab full");
                self.entries.push(Entry::Occupied {
                    generation: 0,
                    value,
                });
                Key {
                    index,
                    generation: 0,
                }
            }
        }
    }

    pub fn get(&self, key: Key) -> Option<&T> {
        match self.entries.get(key.index) {
            Some(Entry::Occupied { generation, value }) if *generation == key.generation => {
                Some(value)
            }
            _ => None,
        }
    }

    pub fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        match self.entries.get_mut(key.index) {
            Some(Entry::Occupied { generation, value }) if *generation == key.generation => {
                Some(value)
            }
            _ => None,
        }
    }

    pub fn remove(&mut self, key: Key) -> Option<T> {
        let entry = self.entries.get_mut(key.index)?;
        match entry {
            Entry::Occupied { generation, .. } if *generation == key.generation => {
                let generation = *generation;
                let old = std::mem::replace(
                    entry,
                    Entry::Vacant {
                        generation,
                        next_free: self.free,
                    },
                );
                self.free = Some(key.index);
                debug_assert!(self.len > 0, "an occupied entry was counted");
                self.len -= 1;
                match old {
                    Entry::Occupied { value, .. } => Some(value),
                    Entry::Vacant { .. } => unreachable!(),
                }
            }
            _ => None,
        }
    }

    /// Keys of every occupied entry.
    pub fn keys(&self) -> Vec<Key> {
        let keys: Vec<Key> = self
            .entries
            .iter()
            .enumerate()
            .filter_map(|(index, e)| match e {
                Entry::Occupied { generation, .. } => Some(Key {
                    index,
                    generation: *generation,
                }),
                Entry::Vacant { .. } => None,
            })
            .collect();
        debug_assert_eq!(keys.len(), self.len, "the count is of occupied entries");
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_keys_miss() {
        let mut s = Slab::default();
        let a = s.insert("a");
        assert_eq!(s.remove(a), Some("a"));
        let b = s.insert("b");
        assert_eq!(a.index, b.index);
        assert_ne!(a, b);
        assert_eq!(s.get(a), None);
        assert_eq!(s.remove(a), None);
        assert_eq!(s.get(b), Some(&"b"));
        assert_eq!(Key::from_u64(b.to_u64()), b);
        assert_eq!(s.len(), 1);
    }
}
