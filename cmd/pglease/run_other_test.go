//go:build unix && !linux

package main

// keeperCases is empty: there is no keeper off Linux.
var keeperCases []cliCase
