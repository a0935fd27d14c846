"""Host profiles shipped with gpusim (package data; see gpusim.hw.host)."""
