// shmio — look at and clean up the shared-memory segments of this user.
//
//   shmio ls [PREFIX] [--json]        every segment: name, kind, size, creator, live or stale
//   shmio stat NAME [--json]          one segment in detail
//   shmio rm NAME [--force]           remove a stale segment (a live one only with --force)
//   shmio rm --stale [PREFIX] [--json]  remove every stale segment and abandoned temporary file
//
// With PREFIX, only names that start with it count (a temporary file's name is its file name).
// NAME is a shmio name ("jobs", "Global\jobs") or the path of a file in /dev/shm. Exit status:
// 0 success, 1 failure (e.g. no such segment, or `stat` of a file the library refuses), 2 wrong
// usage. In --json, "state" is live, stale, creating or refused, and "status" ok, corrupted,
// incompatible, refused (a file the library will not use) or unreadable (it could not be read).
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <shmio/inspect.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "json_writer.hpp"

namespace {

namespace inspect = shmio::inspect;
using shmio::tool::json_writer;

constexpr const char* usage =
    "usage: shmio ls [PREFIX] [--json]\n"
    "       shmio stat NAME [--json]\n"
    "       shmio rm NAME [--force]\n"
    "       shmio rm --stale [PREFIX] [--json]\n"
    "NAME is a segment name (\"jobs\", \"Global\\jobs\") or a file path in /dev/shm.\n";

// ---- text ---------------------------------------------------------------------------------

std::string bytes(std::uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::string utc_time(std::uint64_t ns) {
  std::time_t t = static_cast<std::time_t>(ns / 1'000'000'000);
  std::tm tm{};
  char buf[32] = "?";
  if (gmtime_r(&t, &tm)) std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A character a terminal acts on rather than shows: C1 controls (U+0080-U+009F) and the
// direction marks and overrides (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069).
bool terminal_control(std::string_view seq) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(seq[k]); };
  if (seq.size() == 2) return (b(0) == 0xC2 && b(1) < 0xA0) || (b(0) == 0xD8 && b(1) == 0x9C);
  if (seq.size() != 3 || b(0) != 0xE2) return false;
  return (b(1) == 0x80 && (b(2) == 0x8E || b(2) == 0x8F || (b(2) >= 0xAA && b(2) <= 0xAE))) ||
         (b(1) == 0x81 && b(2) >= 0xA6 && b(2) <= 0xA9);
}

// Control bytes and characters in names, and bytes that are not UTF-8, are shown escaped, so
// that a name cannot play with the terminal.
std::string printable(std::string_view s) {
  std::string out;
  auto escape = [&](std::string_view bytes) {
    for (unsigned char c : bytes) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  };
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f)
        escape(s.substr(i, 1));
      else
        out += static_cast<char>(c);
      ++i;
      continue;
    }
    const std::size_t n = shmio::tool::utf8_sequence(s, i);
    if (n == 0) {
      escape(s.substr(i, 1));
      ++i;
    } else {
      if (terminal_control(s.substr(i, n)))
        escape(s.substr(i, n));
      else
        out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string display_name(const inspect::segment_info& s) {
  return printable(s.name) + (s.name_cut ? "..." : "");
}

std::string state(const inspect::segment_info& s) {
  if (s.status == shmio::errc::access_denied) return "refused";  // not looked into
  if (s.live) return "live";
  if (s.temporary && !s.stale) return "creating";
  return "stale";
}

std::string kind_text(const inspect::segment_info& s) {
  if (s.temporary) return "(temporary)";
  return s.header_read ? inspect::kind_name(s.kind) : "?";
}

std::string creator_text(const inspect::segment_info& s) {
  // A temporary file's pid is only its name's: the creator may be another pid namespace's, so
  // what is known is whether it is held, or old enough to count as abandoned.
  if (s.temporary)
    return std::to_string(s.temp_pid) + (s.live    ? " (held)"
                                         : s.stale ? " (abandoned)"
                                                   : " (young)");
  if (!s.header_read) return "?";
  return std::to_string(s.creator_pid) + (s.creator_alive ? " (alive)" : " (dead)");
}

std::string ring_summary(const inspect::ring_info& r) {
  return std::to_string(r.used()) + "/" + std::to_string(r.node_count) + " used, " +
         std::to_string(r.free) + " free; parked " +
         std::to_string(r.readers.parked_async + r.readers.parked_blocking) + " readers, " +
         std::to_string(r.writers.parked_async + r.writers.parked_blocking) + " writers";
}

std::string count(std::uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string lock_text(const inspect::lock_info& l) {
  std::string t;
  switch (l.state) {
    case inspect::lock_info::state_kind::free:
      t = "free";
      break;
    case inspect::lock_info::state_kind::shared:
      t = "shared by " + std::to_string(l.share_holders) + " (" +
          count(l.shares, "share", "shares") + ")";
      break;
    case inspect::lock_info::state_kind::claimed:
      t = "claimed by pid " + std::to_string(l.writer_pid) + ", waiting for " +
          count(l.shares, "share", "shares");
      break;
    case inspect::lock_info::state_kind::exclusive:
      t = "exclusive (pid " + std::to_string(l.writer_pid) + ")";
      break;
  }
  if (l.owner_dead) t += ", OWNER DEAD";
  return t;
}

std::string lag_text(const inspect::broadcast_info& b) {
  return b.slowest_lag ? std::to_string(*b.slowest_lag) : std::string("-");
}

std::string timeout_text(const inspect::rpc_service_info& r) {
  return r.default_timeout_ms ? "default timeout " + std::to_string(*r.default_timeout_ms) + " ms"
                              : std::string("no default timeout");
}

// "1234 calls" over every method.
std::string calls_text(const inspect::rpc_service_info& r) {
  std::uint64_t calls = 0;
  for (const auto& m : r.methods)
    calls += m.calls;
  // A full table may have left methods out: their calls were not counted.
  return (r.methods.size() >= inspect::rpc_counted_methods ? "at least " : "") +
         count(calls, "call", "calls");
}

// "2 clients (1 live)"; "at least ..." when some connections' names were cut (see inspect.hpp).
std::string clients_text(const inspect::rpc_service_info& r) {
  return std::string(r.clients_complete ? "" : "at least ") +
         count(r.clients.size(), "client", "clients") + " (" + std::to_string(r.live_clients()) +
         " live)";
}

// "CORRUPTED: <problem>" and the like, for a status that is set.
std::string status_text(const std::error_code& status, const std::string& problem) {
  const char* label = status == shmio::errc::corrupted       ? "CORRUPTED"
                      : status == shmio::errc::incompatible  ? "INCOMPATIBLE"
                      : status == shmio::errc::access_denied ? "REFUSED"
                                                             : "UNREADABLE";
  return std::string(label) + ": " + problem;
}

std::string details(const inspect::segment_info& s) {
  if (s.status) return status_text(s.status, s.problem);
  if (s.locked)
    return std::to_string(s.locked->length) + " x " + bytes(s.locked->element_size) + "; lock " +
           lock_text(s.locked->lock);
  if (s.broadcast)
    return std::string(s.broadcast->lossy ? "lossy" : "reliable") + "; " +
           count(s.broadcast->subscribers, "subscriber", "subscribers") + " (" +
           std::to_string(s.broadcast->live_subscribers) + " live), " +
           std::to_string(s.broadcast->slot_count) + " slots, seq " +
           std::to_string(s.broadcast->write_sequence) + ", slowest lag " + lag_text(*s.broadcast);
  if (s.ring) return "nodes " + ring_summary(*s.ring);
  if (s.rpc_service)
    return std::string("server ") + (s.rpc_service->server_alive ? "alive" : "gone") + "; " +
           clients_text(*s.rpc_service) + ", " + std::to_string(s.rpc_service->waiting()) + "/" +
           std::to_string(s.rpc_service->requests.node_count) + " requests waiting, " +
           std::to_string(s.rpc_service->accepted) + " accepted, " + calls_text(*s.rpc_service);
  if (s.rpc)
    return std::string("owner ") + (s.rpc->owner_attached ? "attached" : "gone") + ", opener " +
           (s.rpc->opener_attached ? "attached" : "none") + "; to owner " +
           std::to_string(s.rpc->to_owner.used()) + "/" +
           std::to_string(s.rpc->to_owner.node_count) + " used, to opener " +
           std::to_string(s.rpc->to_opener.used()) + "/" +
           std::to_string(s.rpc->to_opener.node_count) + " used";
  if (s.event)
    return std::string(s.event->signalled ? "set" : "clear") +
           (s.event->manual_reset ? ", manual-reset" : ", auto-reset") + "; parked " +
           std::to_string(s.event->waiters.parked_async + s.event->waiters.parked_blocking);
  return "";
}

void print_table(const std::vector<inspect::segment_info>& all) {
  if (all.empty()) {
    std::printf("no shmio segments\n");
    return;
  }
  std::size_t w = 4;
  for (const auto& s : all)
    w = std::max(w, display_name(s).size());
  std::printf("%-*s  %-17s %10s  %-15s %-8s %s\n", static_cast<int>(w), "NAME", "KIND", "SIZE",
              "CREATOR", "STATE", "DETAILS");
  for (const auto& s : all)
    std::printf("%-*s  %-17s %10s  %-15s %-8s %s\n", static_cast<int>(w), display_name(s).c_str(),
                kind_text(s).c_str(), bytes(s.file_size).c_str(), creator_text(s).c_str(),
                state(s).c_str(), details(s).c_str());
}

void print_queue(const char* what, const inspect::wait_queue_info& q) {
  std::printf("  %-14s %u parked async, %u parked blocking, %u registered", what, q.parked_async,
              q.parked_blocking, q.registered);
  if (!q.pids.empty()) {
    std::printf(" (pids");
    for (auto pid : q.pids)
      std::printf(" %u", pid);
    std::printf(")");
  }
  std::printf("\n");
}

void print_ring(const char* title, const inspect::ring_info& r) {
  std::printf("%s: %u nodes of %s%s\n", title, r.node_count, bytes(r.node_size).c_str(),
              r.single ? ", single writer and reader" : "");
  if (r.single) {
    auto holder = [](std::uint32_t p) { return p ? "participant " + std::to_string(p) : "none"; };
    std::printf("  %-14s writer %s, reader %s\n", "roles", holder(r.writer).c_str(),
                holder(r.reader).c_str());
  }
  std::printf("  %-14s %u free, %u published, %u being written, %u being read", "nodes", r.free,
              r.published, r.writing, r.reading);
  if (r.invalid) std::printf(", %u INVALID", r.invalid);
  std::printf("\n  %-14s head %llu, tail %llu\n", "positions",
              static_cast<unsigned long long>(r.head), static_cast<unsigned long long>(r.tail));
  print_queue("readers", r.readers);
  print_queue("writers", r.writers);
}

void print_detail(const inspect::segment_info& s) {
  std::printf("name:     %s%s\n", printable(s.name).c_str(),
              s.name_cut ? " (cut: the full name was too long for a file name)" : "");
  std::printf("file:     %s\n", printable(s.file).c_str());
  std::printf("state:    %s\n", state(s).c_str());
  std::printf("size:     %s (%llu bytes)\n", bytes(s.file_size).c_str(),
              static_cast<unsigned long long>(s.file_size));
  if (s.temporary) std::printf("creator:  %s\n", creator_text(s).c_str());
  if (s.header_read) {
    std::printf("kind:     %s\n", inspect::kind_name(s.kind).c_str());
    std::printf("version:  %u\n", s.version);
    std::printf("creator:  %s\n", creator_text(s).c_str());
    std::printf("created:  %s\n", utc_time(s.created_ns).c_str());
  }
  std::printf("status:   %s\n", s.status ? status_text(s.status, s.problem).c_str() : "ok");
  if (s.event) {
    std::printf("event:    %s, %s\n", s.event->signalled ? "set" : "clear",
                s.event->manual_reset ? "manual-reset" : "auto-reset");
    print_queue("waiters", s.event->waiters);
  }
  if (s.ring) print_ring("ring", *s.ring);
  if (s.rpc) {
    std::printf("owner:    pid %u, %s\n", s.rpc->owner_pid,
                s.rpc->owner_attached ? "attached" : "gone");
    std::printf("opener:   pid %u, %s; %llu openers so far\n", s.rpc->opener_pid,
                s.rpc->opener_attached ? "attached" : "none",
                static_cast<unsigned long long>(s.rpc->opener_generation));
    std::printf("limit:    messages up to %s\n", bytes(s.rpc->max_message_size).c_str());
    print_ring("ring to opener", s.rpc->to_opener);
    print_ring("ring to owner", s.rpc->to_owner);
  }
  if (s.rpc_service) {
    const auto& r = *s.rpc_service;
    std::printf("server:   pid %u, %s; %llu connections accepted so far\n", r.server_pid,
                r.server_alive ? "alive" : "gone", static_cast<unsigned long long>(r.accepted));
    std::printf("channels: %u nodes of %s each way, messages up to %s, %s\n", r.node_count,
                bytes(r.node_size).c_str(), bytes(r.max_message_size).c_str(),
                timeout_text(r).c_str());
    std::printf("requests: %u waiting, backlog %u\n", r.waiting(), r.requests.node_count);
    std::printf("clients:  %s%zu (%u live)%s\n", r.clients_complete ? "" : "at least ",
                r.clients.size(), r.live_clients(),
                r.clients_complete ? ""
                                   : "; connections with names too long for a file name "
                                     "are not found");
    for (const auto& c : r.clients) {
      std::printf("  %s  client pid %u %s, server end %s", printable(c.name).c_str(), c.pid,
                  c.alive ? "alive" : "gone", c.server_attached ? "attached" : "none");
      if (c.status) std::printf("; %s", status_text(c.status, c.problem).c_str());
      std::printf("\n");
    }
    std::printf("methods:  %zu%s\n", r.methods.size(),
                r.methods.size() >= inspect::rpc_counted_methods
                    ? " (the most a service counts: any others' calls are not counted)"
                    : "");
    for (const auto& m : r.methods)
      std::printf("  %s%s  %s\n", m.name.empty() ? "(unnamed)" : printable(m.name).c_str(),
                  m.name_cut ? "..." : "", count(m.calls, "call", "calls").c_str());
    print_ring("connect ring", r.requests);
  }
  if (s.locked) {
    const auto& l = s.locked->lock;
    std::printf("data:     %llu elements of %s (align %u), %s\n",
                static_cast<unsigned long long>(s.locked->length),
                bytes(s.locked->element_size).c_str(), s.locked->element_align,
                bytes(s.locked->data_size).c_str());
    std::printf("lock:     %s; %s open%s\n", lock_text(l).c_str(),
                count(l.participants, "handle", "handles").c_str(),
                l.owner_died_pending ? "; a holder's death not yet reported" : "");
    print_queue("readers", l.readers);
    print_queue("writers", l.writers);
  }
  if (s.broadcast) {
    const auto& b = *s.broadcast;
    std::printf("mode:     %s, %u slots of %s, lease %u ms\n", b.lossy ? "lossy" : "reliable",
                b.slot_count, bytes(b.message_size).c_str(), b.lease_ms);
    std::printf("subscribers: %u active (%u live), %u evicted, %u entries; slowest lag %s",
                b.subscribers, b.live_subscribers, b.evicted_subscribers, b.max_subscribers,
                lag_text(b).c_str());
    if (b.slowest_lag) std::printf(" (pid %u)", b.slowest_pid);
    std::printf("\n");
    std::printf("sequence: %llu published; writer lock ",
                static_cast<unsigned long long>(b.write_sequence));
    if (b.writer == 0)
      std::printf("free\n");
    else
      std::printf("held by participant %u (%s)\n", b.writer, b.writer_alive ? "alive" : "DEAD");
    std::printf("  %-14s %u published, %u being written, %u empty", "slots", b.published, b.writing,
                b.empty);
    if (b.invalid) std::printf(", %u INVALID", b.invalid);
    std::printf("\n");
    print_queue("readers", b.readers);
    print_queue("writers", b.writers);
  }
}

// ---- JSON ---------------------------------------------------------------------------------

// "ok", "corrupted", "incompatible", "refused" (a file the library will not use: not a
// regular file, another user's, or open to others) or "unreadable" (it could not be looked at).
std::string status_name(const std::error_code& status) {
  if (!status) return "ok";
  if (status == shmio::errc::corrupted) return "corrupted";
  if (status == shmio::errc::incompatible) return "incompatible";
  return status == shmio::errc::access_denied ? "refused" : "unreadable";
}

void write_queue(json_writer& j, const inspect::wait_queue_info& q) {
  j.begin_object();
  j.key("parked_async").value(std::uint64_t{q.parked_async});
  j.key("parked_blocking").value(std::uint64_t{q.parked_blocking});
  j.key("registered").value(std::uint64_t{q.registered});
  j.key("pids").begin_array();
  for (auto pid : q.pids)
    j.value(std::uint64_t{pid});
  j.end_array();
  j.end_object();
}

void write_ring(json_writer& j, const inspect::ring_info& r) {
  j.begin_object();
  j.key("node_count").value(std::uint64_t{r.node_count});
  j.key("node_size").value(std::uint64_t{r.node_size});
  j.key("used").value(std::uint64_t{r.used()});
  j.key("free").value(std::uint64_t{r.free});
  j.key("published").value(std::uint64_t{r.published});
  j.key("writing").value(std::uint64_t{r.writing});
  j.key("reading").value(std::uint64_t{r.reading});
  j.key("invalid").value(std::uint64_t{r.invalid});
  j.key("head").value(r.head);
  j.key("tail").value(r.tail);
  j.key("cursors_apart").value(r.cursors_apart);
  j.key("mode").value(r.single ? "spsc" : "mpmc");
  if (r.single) {
    j.key("writer").value(std::uint64_t{r.writer});
    j.key("reader").value(std::uint64_t{r.reader});
  }
  j.key("readers");
  write_queue(j, r.readers);
  j.key("writers");
  write_queue(j, r.writers);
  j.end_object();
}

void write_segment(json_writer& j, const inspect::segment_info& s) {
  j.begin_object();
  j.key("name").value(s.name);
  j.key("name_cut").value(s.name_cut);
  j.key("file").value(s.file);
  j.key("temporary").value(s.temporary);
  j.key("state").value(state(s));
  j.key("live").value(s.live);
  j.key("stale").value(s.stale);
  j.key("size").value(s.file_size);
  j.key("status").value(status_name(s.status));
  if (s.status) j.key("problem").value(s.problem);
  if (s.temporary) {
    j.key("creator_pid").value(std::uint64_t{s.temp_pid});
  } else if (s.header_read) {
    j.key("kind").value(inspect::kind_name(s.kind));
    j.key("kind_value").value(std::uint64_t{s.kind});
    j.key("version").value(std::uint64_t{s.version});
    j.key("creator_pid").value(std::uint64_t{s.creator_pid});
    j.key("creator_alive").value(s.creator_alive);
    j.key("created_ns").value(s.created_ns);
  }
  if (s.event) {
    j.key("event").begin_object();
    j.key("signalled").value(s.event->signalled);
    j.key("manual_reset").value(s.event->manual_reset);
    j.key("waiters");
    write_queue(j, s.event->waiters);
    j.end_object();
  }
  if (s.ring) {
    j.key("ring");
    write_ring(j, *s.ring);
  }
  if (s.rpc) {
    j.key("rpc").begin_object();
    j.key("owner_pid").value(std::uint64_t{s.rpc->owner_pid});
    j.key("owner_attached").value(s.rpc->owner_attached);
    j.key("opener_pid").value(std::uint64_t{s.rpc->opener_pid});
    j.key("opener_attached").value(s.rpc->opener_attached);
    j.key("opener_generation").value(s.rpc->opener_generation);
    j.key("max_message_size").value(std::uint64_t{s.rpc->max_message_size});
    j.key("to_opener");
    write_ring(j, s.rpc->to_opener);
    j.key("to_owner");
    write_ring(j, s.rpc->to_owner);
    j.end_object();
  }
  if (s.rpc_service) {
    const auto& r = *s.rpc_service;
    j.key("rpc_service").begin_object();
    j.key("node_count").value(std::uint64_t{r.node_count});
    j.key("node_size").value(std::uint64_t{r.node_size});
    j.key("max_message_size").value(std::uint64_t{r.max_message_size});
    j.key("default_timeout_ms");
    if (r.default_timeout_ms)
      j.value(*r.default_timeout_ms);
    else
      j.null();
    j.key("server_pid").value(std::uint64_t{r.server_pid});
    j.key("server_alive").value(r.server_alive);
    j.key("accepted").value(r.accepted);
    j.key("backlog").value(std::uint64_t{r.requests.node_count});
    j.key("waiting").value(std::uint64_t{r.waiting()});
    j.key("clients_complete").value(r.clients_complete);
    j.key("live_clients").value(std::uint64_t{r.live_clients()});
    j.key("clients").begin_array();
    for (const auto& c : r.clients) {
      j.begin_object();
      j.key("name").value(c.name);
      j.key("pid").value(std::uint64_t{c.pid});
      j.key("alive").value(c.alive);
      j.key("server_attached").value(c.server_attached);
      j.key("status").value(status_name(c.status));
      if (c.status) j.key("problem").value(c.problem);
      j.end_object();
    }
    j.end_array();
    j.key("methods").begin_array();
    for (const auto& m : r.methods) {
      j.begin_object();
      j.key("name").value(m.name);
      j.key("name_cut").value(m.name_cut);
      j.key("calls").value(m.calls);
      j.end_object();
    }
    j.end_array();
    j.key("requests");
    write_ring(j, r.requests);
    j.end_object();
  }
  if (s.locked) {
    const auto& l = s.locked->lock;
    j.key("locked").begin_object();
    j.key("element_size").value(std::uint64_t{s.locked->element_size});
    j.key("element_align").value(std::uint64_t{s.locked->element_align});
    j.key("length").value(s.locked->length);
    j.key("data_size").value(s.locked->data_size);
    j.key("lock").begin_object();
    j.key("state").value(inspect::lock_state_name(l.state));
    j.key("shares").value(std::uint64_t{l.shares});
    j.key("share_holders").value(std::uint64_t{l.share_holders});
    j.key("writer").value(std::uint64_t{l.writer});
    j.key("writer_pid").value(std::uint64_t{l.writer_pid});
    j.key("owner_dead").value(l.owner_dead);
    j.key("dead_holders").value(std::uint64_t{l.dead_holders});
    j.key("owner_died_pending").value(l.owner_died_pending);
    j.key("participants").value(std::uint64_t{l.participants});
    j.key("readers");
    write_queue(j, l.readers);
    j.key("writers");
    write_queue(j, l.writers);
    j.end_object();
    j.end_object();
  }
  if (s.broadcast) {
    const auto& b = *s.broadcast;
    j.key("broadcast").begin_object();
    j.key("mode").value(b.lossy ? "lossy" : "reliable");
    j.key("slot_count").value(std::uint64_t{b.slot_count});
    j.key("message_size").value(std::uint64_t{b.message_size});
    j.key("max_subscribers").value(std::uint64_t{b.max_subscribers});
    j.key("lease_ms").value(std::uint64_t{b.lease_ms});
    j.key("write_sequence").value(b.write_sequence);
    j.key("subscribers").value(std::uint64_t{b.subscribers});
    j.key("live_subscribers").value(std::uint64_t{b.live_subscribers});
    j.key("evicted_subscribers").value(std::uint64_t{b.evicted_subscribers});
    j.key("slowest_lag");
    if (b.slowest_lag)
      j.value(*b.slowest_lag);
    else
      j.null();
    j.key("slowest_pid").value(std::uint64_t{b.slowest_pid});
    j.key("writer").value(std::uint64_t{b.writer});
    j.key("writer_alive").value(b.writer_alive);
    j.key("published").value(std::uint64_t{b.published});
    j.key("writing").value(std::uint64_t{b.writing});
    j.key("empty").value(std::uint64_t{b.empty});
    j.key("invalid").value(std::uint64_t{b.invalid});
    j.key("readers");
    write_queue(j, b.readers);
    j.key("writers");
    write_queue(j, b.writers);
    j.end_object();
  }
  j.end_object();
}

// ---- commands -----------------------------------------------------------------------------

int fail(const std::string& what, const std::error_code& ec) {
  std::fprintf(stderr, "shmio: %s: %s\n", printable(what).c_str(), ec.message().c_str());
  return 1;
}

inspect::segment_info find(const std::string& arg, std::error_code& ec) {
  if (arg.starts_with("/")) return inspect::examine_file(arg, ec);
  return inspect::examine(arg, ec);
}

std::vector<inspect::segment_info> list_matching(const std::string& prefix, std::error_code& ec) {
  std::vector<inspect::segment_info> out;
  for (auto& s : inspect::list(ec))
    if (s.name.starts_with(prefix)) out.push_back(std::move(s));
  return out;
}

int list(const std::string& prefix, bool json) {
  std::error_code ec;
  auto all = list_matching(prefix, ec);
  if (ec) return fail("/dev/shm", ec);
  if (json) {
    json_writer j;
    j.begin_array();
    for (const auto& s : all)
      write_segment(j, s);
    j.end_array();
    std::printf("%s\n", j.str().c_str());
  } else {
    print_table(all);
  }
  return 0;
}

int stat(const std::string& name, bool json) {
  std::error_code ec;
  auto s = find(name, ec);
  if (ec == shmio::errc::not_found) {
    std::fprintf(stderr, "shmio: no segment named '%s'\n", printable(name).c_str());
    return 1;
  }
  // A file the library refuses is shown with why, and the exit status says it is not usable.
  const bool refused = ec == shmio::errc::access_denied && s.status;
  if (ec && !refused) return fail(name, ec);
  if (json) {
    json_writer j;
    write_segment(j, s);
    std::printf("%s\n", j.str().c_str());
  } else {
    print_detail(s);
  }
  return refused ? 1 : 0;
}

int remove_one(const std::string& name, bool force) {
  std::error_code ec;
  auto s = find(name, ec);
  if (ec == shmio::errc::not_found) {
    std::fprintf(stderr, "shmio: no segment named '%s'\n", printable(name).c_str());
    return 1;
  }
  if (ec) return fail(name, ec);
  if (inspect::remove_file_if_stale(s.file, ec)) {
    std::printf("removed %s (stale)\n", display_name(s).c_str());
    return 0;
  }
  if (ec != shmio::errc::busy) return fail(name, ec);
  if (!force) {
    std::fprintf(stderr,
                 "shmio: '%s' is in use; processes that have it open keep using it after a "
                 "removal. Use --force to remove it anyway.\n",
                 printable(name).c_str());
    return 1;
  }
  // By path rather than by name: that covers cut names as well.
  if (!inspect::remove_file(s.file, ec)) return fail(name, ec);
  std::printf("removed %s (it was in use)\n", display_name(s).c_str());
  return 0;
}

int remove_stale(const std::string& prefix, bool json) {
  std::error_code ec;
  auto all = list_matching(prefix, ec);
  if (ec) return fail("/dev/shm", ec);
  json_writer j;
  j.begin_array();
  int removed = 0;
  int failed = 0;
  for (const auto& s : all) {
    if (!s.stale) continue;
    std::error_code one;
    if (!inspect::remove_file_if_stale(s.file, one)) {
      // In use again, or gone: fine. Anything else is a failure, and the exit status says so.
      if (one && one != shmio::errc::busy && one != shmio::errc::not_found) {
        fail(s.file, one);
        ++failed;
      }
      continue;
    }
    ++removed;
    if (json)
      write_segment(j, s);
    else
      std::printf("removed %s\n",
                  s.temporary ? printable(s.file).c_str() : display_name(s).c_str());
  }
  j.end_array();
  if (json)
    std::printf("%s\n", j.str().c_str());
  else if (removed == 0 && failed == 0)
    std::printf("nothing stale\n");
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args;
  bool json = false, force = false, stale = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json")
      json = true;
    else if (a == "--force")
      force = true;
    else if (a == "--stale")
      stale = true;
    else if (a == "-h" || a == "--help" || a == "help") {
      std::printf("%s", usage);
      return 0;
    } else if (a.starts_with("--")) {
      std::fprintf(stderr, "shmio: unknown option %s\n%s", a.c_str(), usage);
      return 2;
    } else
      args.push_back(a);
  }
  const std::string cmd = args.empty() ? "" : args[0];
  const std::string prefix = args.size() == 2 ? args[1] : "";
  if (cmd == "ls" && args.size() <= 2 && !force && !stale) return list(prefix, json);
  if (cmd == "stat" && args.size() == 2 && !force && !stale) return stat(args[1], json);
  if (cmd == "rm" && stale && args.size() <= 2 && !force) return remove_stale(prefix, json);
  if (cmd == "rm" && !stale && args.size() == 2 && !json) return remove_one(args[1], force);
  std::fprintf(stderr, "%s", usage);
  return 2;
}
