#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "plugins/affinity/machine_cache.hpp"
#include "plugins/affinity/plan_table.hpp"
#include "plugins/affinity/topology.hpp"

using namespace saker::affinity;

namespace {
std::string fixture(const char* name) { return std::string(SAKER_TEST_DATA) + "/" + name; }
}  // namespace

TEST_CASE("affinity topology: the DGX-like fixture has 2 NUMA nodes, 32 cores, 8 GPUs, 4 HCAs") {
  const Machine m = load_xml_file(fixture("topo-dgx-2s-8gpu-4nic.xml"));
  CHECK(m.hostname == "dgx");
  REQUIRE(m.numas.size() == 2);
  CHECK(m.cores.size() == 32);
  CHECK(m.numas[1].pus == parse_index_list("16-31,48-63", "t"));
  CHECK(m.cores[0].pus == IndexList{0, 32});
  REQUIRE(m.gpus.size() == 8);
  CHECK(m.gpus[0].pci_bus_id == "0000:02:00.0");
  CHECK(m.gpus[0].os_names == "cuda0");
  CHECK(m.gpus[3].numa == 0);
  CHECK(m.gpus[4].numa == 1);
  REQUIRE(m.nics.size() == 5);  // eno1 + mlx5_0..3, by PCI bus id
  CHECK(m.nics[0].netdev == "eno1");
  CHECK_FALSE(m.nics[0].rdma());
  CHECK(m.nics[1].hca == "mlx5_0");
  CHECK(m.nics[1].netdev == "ib0");
  CHECK(m.nics[4].hca == "mlx5_3");
  CHECK(m.nics[4].numa == 1);
  // PCI tree distance: same switch 2 hops, other switch on the socket 4, other socket 8.
  CHECK(m.gpu_nic_hops[0][1] == 2);
  CHECK(m.gpu_nic_hops[0][2] == 4);
  CHECK(m.gpu_nic_hops[0][3] == 8);
  CHECK(m.numa_nic_hops[1][4] < m.numa_nic_hops[0][4]);
}

TEST_CASE("affinity topology: no-NIC, CPU-only and sub-NUMA fixtures") {
  const Machine nonic = load_xml_file(fixture("topo-snc2-4gpu-no-nic.xml"));
  CHECK(nonic.nics.empty());
  CHECK(nonic.gpus.size() == 4);
  CHECK(nonic.numas.size() == 2);
  CHECK(nonic.gpus[2].numa == 1);
  CHECK(nonic.gpus[2].pci_bus_id == "0000:42:00.0");
  const Machine cpu = load_xml_file(fixture("topo-2s-cpu-only.xml"));
  CHECK(cpu.gpus.empty());
  CHECK(cpu.nics.size() == 2);
  CHECK(cpu.cores.size() == 8);
}

TEST_CASE("affinity topology: a missing or broken file is an error that names it") {
  CHECK_THROWS_WITH(load_xml_file("/nonexistent/topo.xml"), Catch::Contains("/nonexistent/topo.xml"));
  CHECK_THROWS_AS(load_xml_buffer("<topology version=\"2.0\"><object"), saker::Error);
}

TEST_CASE("affinity topology: each kind of broken file gets its own reason") {
  CHECK_THROWS_WITH(load_xml_buffer(""), Catch::Contains("is empty"));
  CHECK_THROWS_WITH(load_xml_buffer("  \n"), Catch::Contains("is empty"));
  CHECK_THROWS_WITH(load_xml_buffer("\x7f" "ELF binary"), Catch::Contains("is not XML") && Catch::Contains(".ELF"));
  CHECK_THROWS_WITH(load_xml_buffer("<?xml version=\"1.0\"?><html></html>"), Catch::Contains("not an hwloc topology"));
  CHECK_THROWS_WITH(load_xml_buffer("<?xml version=\"1.0\"?>\n<topology version=\"2.0\">\n  <object type=\"Machine\""),
                    Catch::Contains("is truncated") && Catch::Contains("no closing </topology>"));
  // hwloc 3 exports version 3.0, which hwloc 2 refuses with only EINVAL.
  const std::string v3 = "<?xml version=\"1.0\"?>\n<topology version=\"3.0\">\n<object type=\"Machine\"/>\n</topology>\n";
  CHECK_THROWS_WITH(load_xml_buffer(v3), Catch::Contains("hwloc XML version 3.0") &&
                                             Catch::Contains("--export-xml-flags v2") && Catch::Contains("newer hwloc"));
  // Well-formed enough for the checks, but hwloc itself refuses it: say so, and how to see hwloc's reason.
  CHECK_THROWS_WITH(load_xml_buffer("<topology version=\"2.0\"><object type=\"Bogus\"/></topology>"),
                    Catch::Contains("hwloc cannot load") && Catch::Contains("HWLOC_XML_VERBOSE=1"));
}

namespace {
struct TempDir {
  std::string path;
  TempDir() {
    char dir[] = "/tmp/saker-topo-test-XXXXXX";
    REQUIRE(::mkdtemp(dir) != nullptr);
    path = dir;
  }
  ~TempDir() {
    for (const char* f : {"/topology.xml", "/topology.bin"}) ::unlink((path + f).c_str());
    ::rmdir(path.c_str());
  }
};
std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}
}  // namespace

TEST_CASE("affinity topology: a file hwloc refuses is reported with hwloc's own reason") {
  if (std::system("command -v hwloc-info >/dev/null 2>&1") != 0) {
    WARN("hwloc-info is not installed: hwloc's reason cannot be asked for here");
    return;
  }
  char path[] = "/tmp/saker-topo-bogus-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  const std::string bogus = "<topology version=\"2.0\"><object type=\"Bogus\"/></topology>\n";
  REQUIRE(::write(fd, bogus.data(), bogus.size()) == static_cast<ssize_t>(bogus.size()));
  ::close(fd);
  CHECK_THROWS_WITH(load_xml_file(path), Catch::Contains("hwloc says: unrecognized object type string Bogus") &&
                                             Catch::Contains(path));
  ::unlink(path);
}

TEST_CASE("affinity topology: an absent topology file is discovered once, written as XML, and cached") {
  TempDir dir;
  const TopologySource source{dir.path + "/topology.xml", dir.path + "/topology.bin"};
  const Machine live = load_cached(source);
  CHECK_FALSE(live.cores.empty());
  CHECK(slurp(source.xml_path).find("<topology") != std::string::npos);
  REQUIRE_FALSE(slurp(source.cache_path).empty());
  // The compact cache answers the next load: poison the XML's bytes-to-key link by
  // changing the cache's hostname only, and see it come back.
  Machine marked = live;
  marked.hostname = "from-cache";
  std::ofstream(source.cache_path, std::ios::trunc | std::ios::binary)
      << encode_machine(marked, cache_key("xml:" + slurp(source.xml_path)));
  CHECK(load_cached(source).hostname == "from-cache");
  // A changed topology file changes the key: the stale cache is not used.
  std::string xml = slurp(source.xml_path);
  const auto pos = xml.find("<object type=\"Machine\"");
  xml.insert(xml.find('>', pos) + 1, "<info name=\"HostName\" value=\"edited\"/>");
  std::ofstream(source.xml_path, std::ios::trunc) << xml;
  CHECK(load_cached(source).hostname == "edited");
}

TEST_CASE("affinity topology: the compact cache round-trips and refuses what is not its own") {
  const Machine m = load_xml_file(fixture("real/hp-sl390s-3tesla-ati-ib.xml"));
  const std::string bytes = encode_machine(m, 42);
  const auto back = decode_machine(bytes, 42);
  REQUIRE(back.has_value());
  CHECK(format_machine(*back) == format_machine(m));
  CHECK_FALSE(decode_machine(bytes, 43).has_value());                            // other inputs
  CHECK_FALSE(decode_machine(bytes.substr(0, bytes.size() - 1), 42).has_value());  // truncated
  CHECK_FALSE(decode_machine(bytes + "x", 42).has_value());                      // trailing bytes
  CHECK_FALSE(decode_machine("<topology version=\"2.0\">", 42).has_value());     // an old XML cache
  std::string corrupt = bytes;
  for (std::size_t i = 16; i < corrupt.size(); i += 7) corrupt[i] = static_cast<char>(0xff);
  CHECK_FALSE(decode_machine(corrupt, 42).has_value());
}

TEST_CASE("affinity topology: show lists GPUs, NUMA nodes and NIC distances") {
  const std::string text = format_machine(load_xml_file(fixture("topo-1s-4gpu.xml")));
  CHECK_THAT(text, Catch::Contains("0000:04:01.0"));
  CHECK_THAT(text, Catch::Contains("mlx5_1:1"));
  CHECK_THAT(text, Catch::Contains("hops gpu3"));
  CHECK_THAT(text, Catch::Contains("0-15"));
  CHECK_THAT(text, Catch::Contains("numbered by"));
}
