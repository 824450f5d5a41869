#include "peer.hpp"
