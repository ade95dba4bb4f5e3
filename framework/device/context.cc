#include "framework/device/context.h"

namespace keel {

DeviceContext& device_context() {
  thread_local DeviceContext ctx;
  return ctx;
}

}  // namespace keel
