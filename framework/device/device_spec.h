// What a replicated device is: N logical cores, each with its own HBM budget, driven by H hosts (a pod
// slice: hosts x cores_per_host). Core c belongs to host c / cores_per_host(); global replica ids run
// over the whole slice, so the topology (and the order of every sum) does not depend on how many
// processes drive it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace keel {

// What one process of a multi-process run drives: hosts/P consecutive hosts and their cores.
struct ProcessShare {
  int first_host = 0, hosts = 1;  // hosts [first_host, first_host + hosts)
  int first_core = 0, cores = 1;  // global core ids [first_core, first_core + cores)
};

struct DeviceSpec {
  std::string name;               // "v3-8", "cpu", or "custom"
  int cores = 1;
  int64_t hbm_bytes_per_core = 0; // 0: no budget (host RAM)
  int hosts = 1;                  // divides cores; a stored spec without it is one host

  bool has_budget() const { return hbm_bytes_per_core > 0; }
  int cores_per_host() const { return cores / hosts; }
  int host_of(int core) const { return core / cores_per_host(); }
  int first_core_of(int host) const { return host * cores_per_host(); }

  // The presets of DESIGN.md (contract). Throws std::invalid_argument naming the known presets.
  static DeviceSpec preset(const std::string& name);
  // 1..kMaxCores cores; hbm_bytes_per_core 0 (no budget) or 1..kMaxHbmBytesPerCore (core/limits.h);
  // hosts 1..kMaxHosts and a divisor of cores (else std::invalid_argument listing the divisors).
  static DeviceSpec custom(int cores, int64_t hbm_bytes_per_core, int hosts = 1);
  // A spec read back (a checkpoint's): name 1..kMaxNameBytes, cores, HBM and hosts within the limits
  // above. Throws std::invalid_argument.
  void validate() const;
  static const std::vector<std::string>& preset_names();
  // Process `rank` of `processes` (mpirun -np P; P must divide hosts): its hosts and cores. Throws
  // std::invalid_argument naming the process counts that work.
  ProcessShare share(int processes, int rank) const;
};

// The divisors of n, ascending: the host counts a slice of n cores can have, and (of its hosts) the
// process counts that can drive a slice.
std::vector<int> divisors(int n);
// "1, 2, 4, 8": how messages list the values that work.
std::string join_ints(const std::vector<int>& values);

// "512MiB", "16GiB", "95GB", "1048576" → bytes. Throws std::invalid_argument on anything else.
int64_t parse_bytes(const std::string& text);
// 16 GiB → "16.00 GiB"; small values in B/KiB/MiB.
std::string format_bytes(int64_t bytes);

}  // namespace keel
