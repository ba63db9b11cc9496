// What saker-stats shows of a job's records: plain verdicts, a table, JSON, a terminal
// sparkline and an SVG plot of utilisation over time (written here, no plotting library).
#pragma once

#include <string>
#include <vector>

#include "telemetry/record.hpp"

namespace saker::telemetry {

// Sentences an operator or user can act on, worst first, e.g.
// "GPU 3 on node n7 idle 92% of step 42.0", "rank 5 spent 40% of its time in allreduce".
std::vector<std::string> verdicts(const std::vector<NodeStepRecord>& records);

// One row per step and node, then one per GPU and per rank.
std::string table(const std::vector<NodeStepRecord>& records);
std::string to_json(const std::string& job, const std::vector<NodeStepRecord>& records,
                    const std::vector<std::string>& problems);

// "▁▃█▆" over 0..100, at most `width` characters (values averaged into buckets).
std::string sparkline(const std::vector<double>& percent, std::size_t width = 60);
// A standalone SVG: every series of every record, utilisation (%) against time.
std::string svg_plot(const std::string& title, const std::vector<NodeStepRecord>& records);

// "1.5 GiB", "300 MiB", "12 KiB", "5 B".
std::string human_bytes(double bytes);

}  // namespace saker::telemetry
