//go:build unix && !linux

package main

// reaperCases is empty: there is no reaper off Linux.
var reaperCases []cliCase
