#pragma once
// Everything shmio offers, in one include.

#include "shmio/broadcast_buffer.hpp"
#include "shmio/buffer_read_write.hpp"
#include "shmio/bytes.hpp"
#include "shmio/circular_buffer.hpp"
#include "shmio/error.hpp"
#include "shmio/named_event.hpp"
#include "shmio/open_mode.hpp"
#include "shmio/rpc_acceptor.hpp"
#include "shmio/rpc_buffer.hpp"
#include "shmio/rpc_methods.hpp"
#include "shmio/rpc_server.hpp"
#include "shmio/rpc_stream.hpp"
#include "shmio/rw_lock.hpp"
#include "shmio/segment.hpp"
#include "shmio/shared_array.hpp"
#include "shmio/wait_strategy.hpp"
