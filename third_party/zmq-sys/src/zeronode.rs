// zeronode's addition to the bindings: the function that shim/external.cpp exports.

extern "C" {
    /// Like `zmq_msg_init_data`, but libzmq keeps the message's reference-counted header
    /// in `content_` (at least `ZERONODE_MSG_CONTENT_SIZE` bytes, aligned to 8, left alone by
    /// the caller until `ffn_` is called) instead of allocating it. `ffn_(data_, hint_)` is
    /// called once libzmq is done with the message and every copy of it. Returns 0, or -1
    /// if a pointer is null (then nothing was initialised).
    pub fn zeronode_msg_init_external(
        msg_: *mut crate::ffi::zmq_msg_t,
        content_: *mut ::std::os::raw::c_void,
        data_: *mut ::std::os::raw::c_void,
        size_: usize,
        ffn_: crate::ffi::zmq_free_fn,
        hint_: *mut ::std::os::raw::c_void,
    ) -> ::std::os::raw::c_int;
}

/// The size of libzmq 4.3.4's message header (`msg_t::content_t`: four pointer-sized fields
/// and a 32-bit atomic counter, padded to 8) that `zeronode_msg_init_external` places in the
/// caller's memory.
pub const ZERONODE_MSG_CONTENT_SIZE: usize = 40;
