// Command kstatus prints kstatus' verdict for each Kubernetes object in a JSON array read from stdin,
// one line per object: "<status>\t<message>" (InProgress, Current, Failed, ...). A test helper only.
package main

import (
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	// apimachinery's json keeps whole numbers int64, as kstatus reads generations.
	var objects []interface{}
	data, err := io.ReadAll(os.Stdin)
	if err == nil {
		err = json.Unmarshal(data, &objects)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kstatus: stdin is not a JSON array of objects:", err)
		os.Exit(2)
	}
	for _, item := range objects {
		obj, ok := item.(map[string]interface{})
		if !ok {
			fmt.Fprintln(os.Stderr, "kstatus: not an object:", item)
			os.Exit(2)
		}
		result, err := status.Compute(&unstructured.Unstructured{Object: obj})
		if err != nil {
			fmt.Fprintln(os.Stderr, "kstatus:", err)
			os.Exit(1)
		}
		fmt.Printf("%s\t%s\n", result.Status, result.Message)
	}
}
