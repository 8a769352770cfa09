// The target's C sources. The header's primitives are inline; the crash handler joins them here.
#include "CTelemetrySignals.h"
