#pragma once
// Every structure shmio places in shared memory, one file per object under layout/.
// docs/protocol.md describes each byte; the static_asserts in each file pin the same offsets,
// so the two cannot drift apart silently.
//
// Rules for everything here:
// - fixed-width fields, little-endian (the machine's), no pointers: offsets and counts only;
// - every value read back is untrusted: code that reads it validates it before use;
// - atomics are lock-free and have the size of their value, so another language can use them;
// - fields that different processes write often sit in different 64-byte cache lines.

#include "shmio/detail/layout/broadcast.hpp"
#include "shmio/detail/layout/event.hpp"
#include "shmio/detail/layout/locks.hpp"
#include "shmio/detail/layout/ring.hpp"
#include "shmio/detail/layout/rpc.hpp"
#include "shmio/detail/layout/segment.hpp"
#include "shmio/detail/layout/wait_queue.hpp"
