// Command clusterbin is a multi-call binary holding the Kubernetes control
// plane, the kubelet, kube-proxy, kubectl and etcd, so the huge dependency graph is
// compiled and linked once. It dispatches on the basename of argv[0]
// (symlinks named kube-apiserver, kubelet, ...) or, failing that, on its
// first argument: `clusterbin kubelet --help`.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	_ "time/tzdata" // CronJob time zones (as in the upstream kube-controller-manager main)

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

func runCobra(c *cobra.Command) { os.Exit(cli.Run(c)) }

var components = map[string]func(){
	"kube-apiserver":          func() { runCobra(apiserver.NewAPIServerCommand()) },
	"kube-controller-manager": func() { runCobra(controllermanager.NewControllerManagerCommand()) },
	"kube-scheduler":          func() { runCobra(scheduler.NewSchedulerCommand()) },
	"kubelet":                 func() { runCobra(kubelet.NewKubeletCommand(context.Background())) },
	"kube-proxy":              func() { runCobra(proxy.NewProxyCommand()) },
	"kubectl": func() {
		logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) // nolint:errcheck
		if err := cli.RunNoErrOutput(kubectlcmd.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
	},
	"etcd": func() { etcdmain.Main(os.Args); os.Exit(0) },
}

func main() {
	name := filepath.Base(os.Args[0])
	if _, ok := components[name]; !ok && len(os.Args) > 1 {
		// `clusterbin <component> args...`: shift so the component sees a
		// normal argv (cobra reads os.Args[1:]).
		name = os.Args[1]
		os.Args = append([]string{name}, os.Args[2:]...)
	}
	run, ok := components[name]
	if !ok {
		names := make([]string, 0, len(components))
		for n := range components {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "usage: clusterbin {%s} [args...]\n", strings.Join(names, "|"))
		os.Exit(2)
	}
	run()
}
