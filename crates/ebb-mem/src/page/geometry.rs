//! The page allocator's sizes: pages, block orders, regions.

/// Size of a page, the unit of the page allocator.
pub const PAGE_SIZE: usize = 4096;
/// Largest block order: blocks go up to `PAGE_SIZE << MAX_ORDER` (4 MiB).
pub const MAX_ORDER: usize = 10;
/// Bytes in the largest block.
pub const MAX_BLOCK: usize = PAGE_SIZE << MAX_ORDER;
/// Number of orders, `0..=MAX_ORDER`.
pub const ORDERS: usize = MAX_ORDER + 1;
/// How many separate ranges one page allocator can manage.
pub const MAX_REGIONS: usize = 64;

/// The smallest order whose blocks hold `bytes` bytes (`None` beyond [`MAX_ORDER`]).
pub const fn order_for(bytes: usize) -> Option<usize> {
    let pages = bytes.div_ceil(PAGE_SIZE);
    let order = if pages <= 1 {
        0
    } else {
        (usize::BITS - (pages - 1).leading_zeros()) as usize
    };
    if order <= MAX_ORDER {
        Some(order)
    } else {
        None
    }
}
