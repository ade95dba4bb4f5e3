#include "framework/device/replica_rows.h"

#include <stdexcept>

namespace keel {
namespace {
thread_local const ReplicaRows* tls_replica_rows = nullptr;
}  // namespace

ReplicaRows::ReplicaRows(const std::vector<int64_t>& rows) : begin_{0} {
  for (int64_t n : rows) {
    if (n < 0) throw std::invalid_argument("ReplicaRows: a negative row count");
    begin_.push_back(begin_.back() + n);
  }
}

const ReplicaRows* replica_rows() { return tls_replica_rows; }

ReplicaRowsScope::ReplicaRowsScope(const ReplicaRows* rows) : saved_(tls_replica_rows) { tls_replica_rows = rows; }

ReplicaRowsScope::~ReplicaRowsScope() { tls_replica_rows = saved_; }

}  // namespace keel
