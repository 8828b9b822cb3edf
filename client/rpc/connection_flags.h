#pragma once
// The connection flags shared by odeserve-cli and odeserve-bench (--address, TLS, token),
// defined once so both tools accept exactly the same spelling and defaults.

#include "client/rpc/connection.h"

namespace odeserve::client {

/// ConnectionOptions from the parsed flags; --token falls back to $ODESERVE_TOKEN.
ConnectionOptions ConnectionFromFlags();

}  // namespace odeserve::client
