//! A request the node has no memory for costs that request (`503`, the connection closes),
//! not the node: the allocator here refuses, on this thread, every allocation above a
//! size the test sets — as the native allocator does when memory runs out.

#[path = "common/conn.rs"]
mod conn;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use conn::Conn;
use ebb::net::{IOBuf, TcpHandler};
use httpd::Http;

thread_local! {
    static FAIL_ABOVE: Cell<usize> = const { Cell::new(usize::MAX) };
}

struct Refusing;

// SAFETY: forwards to `System`, or returns null (an allocation failure) without touching it.
unsafe impl GlobalAlloc for Refusing {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > FAIL_ABOVE.try_with(Cell::get).unwrap_or(usize::MAX) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Refusing = Refusing;

/// `receive(data)` with allocations above `limit` bytes refused.
fn receive_refusing(http: &mut Http, conn: &Conn, data: &[u8], limit: usize) {
    let buf = IOBuf::copy_from_slice(data);
    FAIL_ABOVE.set(limit);
    http.receive(conn, buf);
    FAIL_ABOVE.set(usize::MAX);
}

#[test]
fn a_request_the_node_has_no_memory_for_gets_503() {
    // No memory to buffer the request.
    let conn = Conn::new(1 << 20);
    conn.out.borrow_mut().reserve(4096);
    conn.pieces.borrow_mut().reserve(16);
    let mut http = Http::default();
    let mut request = b"GET / HTTP/1.1\r\nHost: x\r\nX: ".to_vec();
    request.extend(std::iter::repeat_n(b'a', 8192));
    request.extend_from_slice(b"\r\n\r\n");
    receive_refusing(&mut http, &conn, &request, 4096);
    assert_eq!(conn.statuses(), [503]);
    assert!(conn.closed.get());
    assert!(conn.heads()[0].contains("\r\nConnection: close\r\n"));

    // Buffered, but no memory for the answer.
    let conn = Conn::new(1 << 20);
    conn.out.borrow_mut().reserve(4096);
    conn.pieces.borrow_mut().reserve(16);
    let mut http = Http::default();
    receive_refusing(&mut http, &conn, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 100);
    assert_eq!(conn.statuses(), [503]);
    assert!(conn.closed.get());
}
