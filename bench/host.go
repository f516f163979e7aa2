package main

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// readHost describes the machine the benchmark runs on, from /proc where
// it exists: the processor, memory, kernel and the load average now.
func readHost() Host {
	h := Host{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Pglock: pglockVersion, LoadStart: loadavg()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			switch {
			case !ok:
			case k == "model name" && h.CPU == "":
				h.CPU = v
			case k == "flags" && !h.Virtual:
				h.Virtual = strings.Contains(" "+v+" ", " hypervisor ")
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
					h.MemoryGiB = kb / (1 << 20)
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.Kernel = strings.TrimSpace(string(b))
	}
	return h
}

// machine names the host in a few words, such as "a virtual machine with
// 2 CPUs (AMD EPYC) and 23.5 GiB of memory, Linux 6.18".
func (h Host) machine() string {
	var b strings.Builder
	if h.Virtual {
		b.WriteString("a virtual machine with ")
	} else {
		b.WriteString("a machine with ")
	}
	b.WriteString(strconv.Itoa(h.CPUs) + " CPUs")
	if h.CPU != "" {
		b.WriteString(" (" + h.CPU + ")")
	}
	if h.MemoryGiB > 0 {
		b.WriteString(" and " + strconv.FormatFloat(h.MemoryGiB, 'f', 1, 64) + " GiB of memory")
	}
	if h.Kernel != "" {
		b.WriteString(", Linux " + h.Kernel)
	}
	return b.String()
}

// loadavg returns the 1, 5 and 15 minute load averages, or "" where
// /proc/loadavg does not exist.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if err != nil || len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
