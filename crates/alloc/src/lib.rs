//! The global allocator of numaplace's binaries and benches: mimalloc,
//! called the way its fast path wants.
//!
//! The `mimalloc` crate's allocator passes every Rust allocation to
//! `mi_malloc_aligned`, because every Rust allocation comes with an
//! alignment. mimalloc 3 serves such a call from its size class only when
//! the class's next free block happens to be aligned, and otherwise, unless
//! the rounded size is a power of two, over-allocates: a 24-byte vector
//! took a 32-byte block and went through three functions to get it. Most
//! of the planner's allocations are small vectors of such sizes. Plain
//! `mi_malloc` already returns blocks aligned to 16 bytes for sizes that
//! are multiples of 16, and to 8 for multiples of 8 (its size classes are
//! whole words, even words above 64 bytes, and a page's first block is
//! 16-aligned), so a request whose alignment is at most 16 and divides its
//! size goes to the plain calls; anything else keeps the aligned ones.
//! On `plan`'s batch of 2-vCPU VMs this took about 900 instructions off
//! each VM, 3.5% (docs/performance.md).

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// mimalloc's `MI_MAX_ALIGN_SIZE`: the alignment its plain calls give a
/// block whose size is a multiple of it.
const PLAIN_ALIGN: usize = 16;

/// The allocator: `#[global_allocator] static A: numaplace_alloc::Allocator = numaplace_alloc::Allocator;`
pub struct Allocator;

/// Whether mimalloc's plain calls give a block of `size` bytes the
/// alignment `align`.
#[inline]
fn plain(size: usize, align: usize) -> bool {
    align <= PLAIN_ALIGN && size.is_multiple_of(align)
}

#[allow(unsafe_code)]
// SAFETY (for the whole impl): each call forwards to the mimalloc function
// for the same request; the plain ones only where `plain` holds, which
// mimalloc's size classes make sufficient (see the crate comment and the
// alignment test below); every block, however allocated, is freed by
// `mi_free` and resized by `mi_realloc*`, which accept blocks from either
// family.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = if plain(layout.size(), layout.align()) {
            mi::mi_malloc(layout.size())
        } else {
            mi::mi_malloc_aligned(layout.size(), layout.align())
        };
        p.cast()
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = if plain(layout.size(), layout.align()) {
            mi::mi_zalloc(layout.size())
        } else {
            mi::mi_zalloc_aligned(layout.size(), layout.align())
        };
        p.cast()
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        mi::mi_free(ptr.cast::<c_void>());
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = if plain(new_size, layout.align()) {
            mi::mi_realloc(ptr.cast::<c_void>(), new_size)
        } else {
            mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align())
        };
        p.cast()
    }
}

#[cfg(test)]
#[allow(unsafe_code)]
mod tests {
    use super::*;

    /// Every size up to 4 KiB and a few large ones, at every alignment up
    /// to 64, many blocks of each so that blocks past a page's first are
    /// checked too: each comes back aligned, holds what was written, and
    /// keeps it through growing and shrinking.
    #[test]
    fn blocks_are_aligned_and_keep_their_bytes() {
        let a = Allocator;
        let sizes = (1..=4096usize).chain([8191, 65536, 65537, 1 << 20, (1 << 22) + 24]);
        for size in sizes {
            for align in [1usize, 2, 4, 8, 16, 32, 64] {
                let Ok(layout) = Layout::from_size_align(size, align) else { continue };
                let count = if size <= 512 { 24 } else { 2 };
                let mut blocks = Vec::with_capacity(count);
                for i in 0..count {
                    // SAFETY: the layout's size is not zero; each block is
                    // written within its size, then freed once below.
                    unsafe {
                        let p = if i % 2 == 0 { a.alloc(layout) } else { a.alloc_zeroed(layout) };
                        assert!(!p.is_null(), "{size} bytes aligned to {align}");
                        assert_eq!(p as usize % align, 0, "{size} bytes aligned to {align}: {p:p}");
                        if i % 2 == 1 {
                            assert!(std::slice::from_raw_parts(p, size).iter().all(|&b| b == 0));
                        }
                        p.write_bytes(i as u8 ^ 0x5a, size);
                        blocks.push(p);
                    }
                }
                for (i, p) in blocks.into_iter().enumerate() {
                    let fill = i as u8 ^ 0x5a;
                    // SAFETY: `p` came from `alloc*` with `layout`; it is
                    // resized with that layout and freed with the new one.
                    unsafe {
                        let grown = a.realloc(p, layout, size * 3);
                        assert_eq!(grown as usize % align, 0, "grown from {size} at {align}");
                        assert!(std::slice::from_raw_parts(grown, size).iter().all(|&b| b == fill));
                        let bigger = Layout::from_size_align_unchecked(size * 3, align);
                        let shrunk = a.realloc(grown, bigger, size.div_ceil(2));
                        assert_eq!(shrunk as usize % align, 0, "shrunk from {} at {align}", size * 3);
                        assert!(std::slice::from_raw_parts(shrunk, size.div_ceil(2)).iter().all(|&b| b == fill));
                        a.dealloc(shrunk, Layout::from_size_align_unchecked(size.div_ceil(2), align));
                    }
                }
            }
        }
    }
}
