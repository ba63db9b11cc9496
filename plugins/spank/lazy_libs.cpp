// libyaml and libhwloc for spank_saker.so, loaded on their first call instead of with the
// plugin.
//
// Why: slurmstepd loads the plugin afresh for every step on every node, and each shared
// library loaded with it costs mapping, relocating and symbol lookups there (libyaml ~45,000
// instructions a node-step, issue 30; bench/spank_step_harness.c). Most steps need neither:
// the policy is read as YAML only by the job prolog and by a step that declares datasets of
// its own, and hwloc only when the node's compact topology cache
// (plugins/affinity/machine_cache.hpp) is missing or stale. (Debian's slurmstepd links
// libhwloc itself, so there only libyaml's load is saved; srun, which loads the plugin for
// every step too, and slurmd's prolog save both, with libudev.)
//
// How: the plugin defines the functions it calls, each forwarding to the real one found by
// dlopen/dlsym on first use. exports.map keeps them local, so libsaker_policy and
// libsaker_affinity inside the plugin bind to them, and -Wl,--as-needed (Makefile.inc)
// then records neither library as needed. Programs outside the plugin link the libraries
// as usual. When a library cannot be loaded the call throws saker::Error naming it: a policy
// that does not load refuses the launch (fail closed) and a topology that cannot be
// discovered leaves the task unbound or, with `strict`, refused (affinity_step.cpp).
#include <dlfcn.h>
#include <hwloc.h>
#include <yaml.h>

#include <string>

#include "common/error.hpp"

// The library the build compiled against: hwloc 2.x is libhwloc.so.15, libyaml 0.2 is
// libyaml-0.so.2 (their Debian and RPM runtime packages: libhwloc15, libyaml-0-2).
static_assert(HWLOC_API_VERSION >= 0x00020000 && HWLOC_API_VERSION < 0x00030000,
              "lazy_libs.cpp loads libhwloc.so.15, hwloc 2.x's soname: update it for this hwloc");

namespace {

struct Lib {
  const char* soname;
  const char* package;  // what to install where it is missing
  void* handle;
};
Lib g_yaml{"libyaml-0.so.2", "libyaml-0-2", nullptr};
Lib g_hwloc{"libhwloc.so.15", "libhwloc15", nullptr};

void* symbol(Lib& lib, const char* name) {
  if (lib.handle == nullptr) {
    // RTLD_LOCAL: its symbols stay out of slurmstepd's global scope, as a linked one's would.
    lib.handle = ::dlopen(lib.soname, RTLD_NOW | RTLD_LOCAL);
    if (lib.handle == nullptr) {
      const char* why = ::dlerror();
      throw saker::Error(saker::explain(std::string("spank_saker.so cannot load ") + lib.soname,
                                        why != nullptr ? why : "not found",
                                        std::string("install ") + lib.package + " on this node"));
    }
  }
  void* f = ::dlsym(lib.handle, name);
  if (f == nullptr)
    throw saker::Error(saker::explain(std::string(lib.soname) + " has no " + name, "it is not the version Saker was built with",
                                      std::string("install ") + lib.package + " as the build machine has it"));
  return f;
}

}  // namespace

// Each definition has the header's own signature (the compiler checks it against the
// declaration) and resolves the real function once.
#define SAKER_LAZY(lib, ret, name, params, args)                                             \
  extern "C" ret name params {                                                               \
    static const auto real = reinterpret_cast<decltype(&name)>(symbol(lib, #name));          \
    return real args;                                                                        \
  }

SAKER_LAZY(g_yaml, int, yaml_parser_initialize, (yaml_parser_t * p), (p))
SAKER_LAZY(g_yaml, void, yaml_parser_delete, (yaml_parser_t * p), (p))
SAKER_LAZY(g_yaml, void, yaml_parser_set_input_string, (yaml_parser_t * p, const unsigned char* in, size_t n), (p, in, n))
SAKER_LAZY(g_yaml, int, yaml_parser_parse, (yaml_parser_t * p, yaml_event_t* e), (p, e))
SAKER_LAZY(g_yaml, int, yaml_parser_load, (yaml_parser_t * p, yaml_document_t* d), (p, d))
SAKER_LAZY(g_yaml, void, yaml_event_delete, (yaml_event_t * e), (e))
SAKER_LAZY(g_yaml, void, yaml_document_delete, (yaml_document_t * d), (d))
SAKER_LAZY(g_yaml, yaml_node_t*, yaml_document_get_node, (yaml_document_t * d, int i), (d, i))
SAKER_LAZY(g_yaml, yaml_node_t*, yaml_document_get_root_node, (yaml_document_t * d), (d))

SAKER_LAZY(g_hwloc, int, hwloc_topology_init, (hwloc_topology_t * t), (t))
SAKER_LAZY(g_hwloc, int, hwloc_topology_load, (hwloc_topology_t t), (t))
SAKER_LAZY(g_hwloc, void, hwloc_topology_destroy, (hwloc_topology_t t), (t))
SAKER_LAZY(g_hwloc, int, hwloc_topology_set_flags, (hwloc_topology_t t, unsigned long f), (t, f))
SAKER_LAZY(g_hwloc, int, hwloc_topology_set_xmlbuffer, (hwloc_topology_t t, const char* b, int n), (t, b, n))
SAKER_LAZY(g_hwloc, int, hwloc_topology_set_io_types_filter, (hwloc_topology_t t, enum hwloc_type_filter_e f), (t, f))
SAKER_LAZY(g_hwloc, int, hwloc_topology_set_cache_types_filter, (hwloc_topology_t t, enum hwloc_type_filter_e f),
           (t, f))
SAKER_LAZY(g_hwloc, int, hwloc_topology_set_icache_types_filter, (hwloc_topology_t t, enum hwloc_type_filter_e f),
           (t, f))
SAKER_LAZY(g_hwloc, int, hwloc_topology_export_xmlbuffer, (hwloc_topology_t t, char** b, int* n, unsigned long f),
           (t, b, n, f))
SAKER_LAZY(g_hwloc, void, hwloc_free_xmlbuffer, (hwloc_topology_t t, char* b), (t, b))
SAKER_LAZY(g_hwloc, hwloc_const_cpuset_t, hwloc_topology_get_allowed_cpuset, (hwloc_topology_t t), (t))
SAKER_LAZY(g_hwloc, int, hwloc_get_type_depth, (hwloc_topology_t t, hwloc_obj_type_t type), (t, type))
SAKER_LAZY(g_hwloc, hwloc_obj_t, hwloc_get_obj_by_depth, (hwloc_topology_t t, int depth, unsigned idx), (t, depth, idx))
SAKER_LAZY(g_hwloc, int, hwloc_bitmap_first, (hwloc_const_bitmap_t b), (b))
SAKER_LAZY(g_hwloc, int, hwloc_bitmap_next, (hwloc_const_bitmap_t b, int prev), (b, prev))
SAKER_LAZY(g_hwloc, int, hwloc_bitmap_weight, (hwloc_const_bitmap_t b), (b))
SAKER_LAZY(g_hwloc, unsigned, hwloc_get_api_version, (void), ())
