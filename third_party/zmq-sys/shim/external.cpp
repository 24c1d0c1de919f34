// zeronode's one addition to libzmq's C API: a message over a buffer whose reference-counted
// header lives in caller-provided memory.
//
// `zmq_msg_init_data` allocates that header (libzmq's `msg_t::content_t`, 40 bytes) with
// `malloc` for every message, and libzmq's I/O thread frees it after writing the message out:
// one cross-thread malloc/free pair per frame sent, which glibc serves through its shared
// fast bins (measured: 10% of a busy client's time). libzmq's own decoder avoids it with
// `msg_t::init_external_storage`, which places the header where the caller says; it is a
// public member of `msg_t`, but not exported through the C API. This exports it.
//
// Only the member function's declaration is repeated here (its mangled name is what links);
// libzmq's headers are not on this build's include path. The header must be at least
// `ZERONODE_MSG_CONTENT_SIZE` bytes, aligned to 8: the size and alignment of `content_t` in
// libzmq 4.3.4 with C++11 atomics (4 pointer-sized fields and a 32-bit counter) is 40 and 8.

#include <stddef.h>

namespace zmq
{
typedef void(msg_free_fn) (void *data_, void *hint_);

class msg_t
{
  public:
    struct content_t;
    int init_external_storage (content_t *content_,
                               void *data_,
                               size_t size_,
                               msg_free_fn *ffn_,
                               void *hint_);
};
}

extern "C" int zeronode_msg_init_external (void *msg_,
                                           void *content_,
                                           void *data_,
                                           size_t size_,
                                           zmq::msg_free_fn *ffn_,
                                           void *hint_)
{
    if (msg_ == NULL || content_ == NULL || data_ == NULL || ffn_ == NULL)
        return -1;
    return static_cast<zmq::msg_t *> (msg_)->init_external_storage (
      static_cast<zmq::msg_t::content_t *> (content_), data_, size_, ffn_,
      hint_);
}
