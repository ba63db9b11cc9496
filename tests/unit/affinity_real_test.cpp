// GPU and NIC identity, restricted CPU sets and the gres.conf cross-check, on real
// machines' topologies (tests/data/real, from hwloc's corpus; README there). Some
// cases edit a real file in memory to add what that machine lacked (compute device
// names, another vendor), each edit said where it is made.
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "plugins/affinity/describe.hpp"
#include "plugins/affinity/gres_check.hpp"
#include "plugins/affinity/plan_table.hpp"
#include "plugins/affinity/planner.hpp"
#include "plugins/affinity/topology.hpp"

using namespace saker::affinity;

namespace {

std::string real_xml(const char* name) {
  std::ifstream in(std::string(SAKER_TEST_DATA) + "/real/" + name);
  std::stringstream text;
  text << in.rdbuf();
  REQUIRE_FALSE(text.str().empty());
  return text.str();
}

// Inserts `child` as the last child of the PCI device `bus` (e.g. "0000:06:00.0"),
// after its <info> elements as hwloc requires; the device must have no child objects.
std::string add_under(std::string xml, const std::string& bus, const std::string& child) {
  const auto at = xml.find("pci_busid=\"" + bus + "\" pci_type");
  REQUIRE(at != std::string::npos);
  xml.insert(xml.find("</object>", at), child);
  return xml;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (auto pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) s.replace(pos, from.size(), to);
  return s;
}

const char* kSl390s = "hp-sl390s-3tesla-ati-ib.xml";

std::string env_of(const RankPlan& rp, const std::string& key) {
  for (const auto& [k, v] : rp.env)
    if (k == key) return v;
  return "<unset>";
}

}  // namespace

TEST_CASE("real topology: the server's ATI VGA chip is not a GPU, the three Teslas are 0-2") {
  const Machine m = load_xml_buffer(real_xml(kSl390s));
  REQUIRE(m.gpus.size() == 3);
  CHECK(m.gpus[0].pci_bus_id == "0000:06:00.0");
  CHECK(m.gpus[1].pci_bus_id == "0000:11:00.0");
  CHECK(m.gpus[2].pci_bus_id == "0000:14:00.0");
  CHECK(m.gpus[1].numa == 1);
  CHECK_THAT(m.gpu_order, Catch::Contains("PCI bus order (fallback"));
}

TEST_CASE("real topology: show numbers cores logically where OS core numbers repeat per package") {
  // Both packages have OS cores 0,1,2,8,9,10: by OS number the two NUMA rows would read alike.
  const std::string text = format_machine(load_xml_buffer(real_xml(kSl390s)));
  CHECK_THAT(text, Catch::Contains("0     0-5    0,2,4,6,8,10,12,14,16,18,20,22"));
  CHECK_THAT(text, Catch::Contains("1     6-11   1,3,5,7,9,11,13,15,17,19,21,23"));
  CHECK_THAT(text, Catch::Contains("numbered by PCI bus order (fallback"));
}

TEST_CASE("real topology: the 0x0c06 InfiniBand card is an RDMA NIC, preferred over the 1 GbE ports") {
  const Machine m = load_xml_buffer(real_xml(kSl390s));
  Request req;
  req.gpus = step_gpus_from_list("0-2");
  req.local_tasks = 3;
  const Plan plan = make_plan(m, req);
  for (const auto& rp : plan.ranks) {
    CHECK(env_of(rp, "NCCL_IB_HCA") == "=mlx4_0:1");
    CHECK(env_of(rp, "UCX_NET_DEVICES") == "mlx4_0:1");
  }
}

TEST_CASE("real topology: GPUs are numbered by their NVML names, not by PCI order") {
  // The DGX-2's NVML indexes follow PCI order; swap two names to see the order follow NVML.
  std::string xml = replace_all(real_xml("nvidia-dgx2-16v100-nvswitch.xml"), "\"nvml0\"", "\"tmp\"");
  xml = replace_all(replace_all(xml, "\"nvml1\"", "\"nvml0\""), "\"tmp\"", "\"nvml1\"");
  const Machine m = load_xml_buffer(xml);
  REQUIRE(m.gpus.size() == 16);  // the twelve NVSwitches (class 0x0680) are not GPUs
  CHECK(m.gpus[0].pci_bus_id == "0000:36:00.0");
  CHECK(m.gpus[1].pci_bus_id == "0000:34:00.0");
  CHECK_THAT(m.gpu_order, Catch::Contains("NVML/CUDA/RSMI"));
}

TEST_CASE("real topology: on a live node, GPUs follow the NVIDIA driver's /dev/nvidiaN minors") {
  // The DGX-2 as if discovered live, with a driver directory that gives the first two
  // GPUs each other's minor (the driver probes in its own order, not always PCI order).
  char dir[] = "/tmp/saker-nvidia-gpus-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const char* buses[] = {"34", "36", "39", "3b", "57", "59", "5c", "5e", "b7", "b9", "bc", "be", "e0", "e2", "e5", "e7"};
  for (unsigned i = 0; i < 16; ++i) {
    const std::string gpu_dir = std::string(dir) + "/0000:" + buses[i] + ":00.0";
    REQUIRE(::mkdir(gpu_dir.c_str(), 0755) == 0);
    std::ofstream(gpu_dir + "/information") << "Model: \t\t Tesla V100\nDevice Minor: \t " << (i < 2 ? 1 - i : i) << "\n";
  }
  hwloc_topology_t topo = nullptr;
  REQUIRE(hwloc_topology_init(&topo) == 0);
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_ALL);
  const std::string xml = real_xml("nvidia-dgx2-16v100-nvswitch.xml");
  REQUIRE(hwloc_topology_set_xmlbuffer(topo, xml.data(), static_cast<int>(xml.size() + 1)) == 0);
  REQUIRE(hwloc_topology_load(topo) == 0);
  const Machine m = describe(topo, true, dir);
  const Machine without_driver = describe(topo, true, std::string(dir) + "/absent");
  hwloc_topology_destroy(topo);
  CHECK(m.gpus[0].pci_bus_id == "0000:36:00.0");
  CHECK(m.gpus[1].pci_bus_id == "0000:34:00.0");
  CHECK(m.gpus[15].pci_bus_id == "0000:e7:00.0");
  CHECK_THAT(m.gpu_order, Catch::Contains("NVIDIA driver minors"));
  CHECK(without_driver.gpus[0].pci_bus_id == "0000:34:00.0");  // NVML order then
  for (const char* bus : buses) {
    const std::string gpu_dir = std::string(dir) + "/0000:" + bus + ":00.0";
    ::unlink((gpu_dir + "/information").c_str());
    ::rmdir(gpu_dir.c_str());
  }
  ::rmdir(dir);
}

TEST_CASE("real topology: an OpenCL-only device of another vendor gets no CUDA index") {
  // Give the Teslas CUDA devices and the ATI chip an OpenCL one (what lstopo shows with both runtimes).
  std::string xml = real_xml(kSl390s);
  xml = add_under(xml, "0000:06:00.0", "<object type=\"OSDev\" name=\"cuda0\" osdev_type=\"5\"/>");
  xml = add_under(xml, "0000:11:00.0", "<object type=\"OSDev\" name=\"cuda1\" osdev_type=\"5\"/>");
  xml = add_under(xml, "0000:14:00.0", "<object type=\"OSDev\" name=\"cuda2\" osdev_type=\"5\"/>");
  xml = add_under(xml, "0000:01:03.0", "<object type=\"OSDev\" name=\"opencl0d0\" osdev_type=\"5\"/>");
  const Machine m = load_xml_buffer(xml);
  REQUIRE(m.gpus.size() == 3);
  CHECK(m.gpus[0].pci_bus_id == "0000:06:00.0");
  CHECK(m.gpus[0].os_names == "cuda0");
}

TEST_CASE("real topology: AMD GPUs (RSMI) get ROCR_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES") {
  // The same board with AMD cards in the Teslas' slots.
  std::string xml = replace_all(real_xml(kSl390s), "0302 [10de:06d2]", "0380 [1002:738c]");
  xml = add_under(xml, "0000:06:00.0", "<object type=\"OSDev\" name=\"rsmi0\" osdev_type=\"1\"/>");
  xml = add_under(xml, "0000:11:00.0", "<object type=\"OSDev\" name=\"rsmi1\" osdev_type=\"1\"/>");
  xml = add_under(xml, "0000:14:00.0", "<object type=\"OSDev\" name=\"rsmi2\" osdev_type=\"1\"/>");
  const Machine m = load_xml_buffer(xml);
  REQUIRE(m.gpus.size() == 3);  // the ATI VGA chip (also vendor 0x1002) still is not one
  CHECK(m.gpus[0].vendor == GpuVendor::amd);
  Request req;
  req.gpus = step_gpus_from_list("0-1");
  req.local_tasks = 2;
  const Plan plan = make_plan(m, req);
  CHECK(env_of(plan.ranks[1], "ROCR_VISIBLE_DEVICES") == "1,0");
  CHECK(env_of(plan.ranks[1], "HIP_VISIBLE_DEVICES") == "1,0");
  CHECK(env_of(plan.ranks[1], "CUDA_VISIBLE_DEVICES") == "<unset>");
}

TEST_CASE("real topology: a restricted CPU set keeps the whole machine's locality") {
  const Machine m = load_xml_buffer(real_xml("hp-sl390s-restricted-to-package0.xml"));
  CHECK(m.all_pus().size() == 24);  // the disallowed package is still there
  CHECK(m.allowed_pus == parse_index_list("0,2,4,6,8,10,12,14,16,18,20,22", "test"));
  REQUIRE(m.gpus.size() == 3);
  CHECK(m.gpus[1].numa == 1);  // not "local to NUMA node 0" as when hwloc dropped package 1
  Request req;
  req.gpus = step_gpus_from_list("1");
  req.allowed = m.allowed_pus;
  req.local_tasks = 1;
  // The GPU's CPUs are all outside the job's: refused, naming both sets.
  CHECK_THROWS_WITH(make_plan(m, req), Catch::Contains("CPUs 1,3,5,7,9,11,13,15,17,19,21,23") &&
                                           Catch::Contains("outside the job's CPUs (0,2,4,6,8,10,12,14,16,18,20,22)"));
}

TEST_CASE("real topology: NICs equally near are spread over the ranks") {
  const Machine m = load_xml_buffer(real_xml("cisco-ucs-usnic-manyVFs.xml"));
  REQUIRE(m.nics.size() == 6);  // eth0, eth1, usnic_0, usnic_1, usnic_2, eth7: VFs without a name are skipped
  Request req;
  req.local_tasks = 4;
  const Plan plan = make_plan(m, req);
  CHECK(env_of(plan.ranks[0], "NCCL_IB_HCA") == "=usnic_0:1");
  CHECK(env_of(plan.ranks[1], "NCCL_IB_HCA") == "=usnic_1:1");
}

TEST_CASE("real topology: too many ranks for the GPUs suggests --shared-gpus") {
  const Machine m = load_xml_buffer(real_xml(kSl390s));
  Request req;
  req.gpus = step_gpus_from_list("0-2");
  req.local_tasks = 4;
  CHECK_THROWS_WITH(make_plan(m, req), Catch::Contains("--shared-gpus"));
}

TEST_CASE("gres.conf check: a matching gres.conf passes, a wrong one is reported line by line") {
  const Machine m = load_xml_buffer(real_xml(kSl390s));
  const std::string good =
      "AutoDetect=off\n"
      "Name=gpu File=/dev/nvidia0 Cores=0-5\n"
      "Name=gpu File=/dev/nvidia[1-2] Cores=6-11  # socket 1\n";
  CHECK(check_gres_conf(m, good).empty());
  const std::string wrong =
      "Name=gpu File=/dev/nvidia0 Cores=6-11\n"            // wrong socket
      "Name=gpu File=/dev/nvidia2 Cores=6-11\n"
      "Name=gpu File=/dev/nvidia1 Cores=6-11 Links=0,-1\n"  // out of order; Links too short
      "Name=gpu File=/dev/nvidia3\n";                      // no such GPU
  const auto problems = check_gres_conf(m, wrong);
  auto has = [&](const std::string& text) {
    return std::any_of(problems.begin(), problems.end(), [&](const std::string& p) { return p.find(text) != std::string::npos; });
  };
  CHECK(has("line 1: File=/dev/nvidia0 has Cores=6-11, but GPU 0 (0000:06:00.0) is local to cores 0-5"));
  CHECK(has("line 3: File=/dev/nvidia1 comes after GPU 2"));
  CHECK(has("line 3: Links=0,-1 has 2 entries, but the topology has 3 GPU(s)"));
  CHECK(has("line 4: File=/dev/nvidia3 names GPU 3, but the topology has 3 GPU(s)"));
  CHECK(problems.size() == 4);
  // A GPU gres.conf forgets is reported too, and lines for other nodes are skipped.
  const auto missing = check_gres_conf(m, "Name=gpu File=/dev/nvidia[0-1] Cores=0-5,6-11\n");
  CHECK(std::any_of(missing.begin(), missing.end(), [](auto& p) { return p.find("GPU 2 (0000:14:00.0) is in the topology but no File= names it") != std::string::npos; }));
  CHECK(check_gres_conf(m, "NodeName=other Name=gpu File=/dev/nvidia9\n", "mirage004").empty());
  // Every NodeName= form picks this node's lines, and only them: a plain name, a comma
  // list (both compared without libslurm) and a bracketed hostlist.
  for (const std::string nodes : {"mirage004", "mirage001,mirage004", "mirage[001-004]", "mirage[003-004],x"}) {
    INFO(nodes);
    CHECK(check_gres_conf(m, "NodeName=" + nodes + " Name=gpu File=/dev/nvidia9\n", "mirage004").size() == 1);
  }
  for (const std::string nodes : {"mirage0040", "mirage00", "mirage001,mirage005", "mirage[001-003]", ""}) {
    INFO(nodes);
    CHECK(check_gres_conf(m, "NodeName=" + nodes + " Name=gpu File=/dev/nvidia9\n", "mirage004").empty());
  }
  // Links= entries counted as Slurm reads them: an empty entry between commas counts, a
  // trailing comma adds none; tabs and CR separate words like blanks.
  const std::string links_base = "Name=gpu File=/dev/nvidia0 Cores=0-5 Links=";
  CHECK(check_gres_conf(m, links_base + "-1,0,0,\nName=gpu File=/dev/nvidia[1-2] Cores=6-11\n").empty());
  CHECK(check_gres_conf(m, links_base + "-1,,0\nName=gpu File=/dev/nvidia[1-2] Cores=6-11\n").empty());
  CHECK(check_gres_conf(m, links_base + "-1,0\nName=gpu File=/dev/nvidia[1-2] Cores=6-11\n").size() == 1);
  CHECK(check_gres_conf(m, "Name=gpu\tFile=/dev/nvidia[0-2]\tCores=0-5\r\n").size() == 2);  // Cores wrong for 1 and 2
  CHECK(expand_gres_files("/dev/nvidia[0-1,3]") ==
        std::vector<std::string>{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia3"});
}
