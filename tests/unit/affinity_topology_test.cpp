#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/error.hpp"
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

TEST_CASE("affinity topology: the cache is written once and then read back") {
  char dir[] = "/tmp/saker-topo-test-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string path = std::string(dir) + "/topology.xml";
  const Machine live = load_cached(path);
  struct stat first {};
  REQUIRE(::stat(path.c_str(), &first) == 0);
  CHECK(first.st_size > 0);
  CHECK_FALSE(live.cores.empty());
  // Mark the cache so the second load provably comes from it, not from a rediscovery.
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string xml = text.str();
  const auto pos = xml.find("<object type=\"Machine\"");
  REQUIRE(pos != std::string::npos);
  xml.insert(xml.find('>', pos) + 1, "<info name=\"HostName\" value=\"from-cache\"/>");
  std::ofstream(path, std::ios::trunc) << xml;
  const Machine cached = load_cached(path);
  CHECK(cached.hostname == "from-cache");
  CHECK(cached.all_pus() == live.all_pus());
  ::unlink(path.c_str());
  ::rmdir(dir);
}

TEST_CASE("affinity topology: show lists GPUs, NUMA nodes and NIC distances") {
  const std::string text = format_machine(load_xml_file(fixture("topo-1s-4gpu.xml")));
  CHECK_THAT(text, Catch::Contains("0000:04:01.0"));
  CHECK_THAT(text, Catch::Contains("mlx5_1:1"));
  CHECK_THAT(text, Catch::Contains("hops gpu3"));
  CHECK_THAT(text, Catch::Contains("0-15"));
}
