module numaplace.example/kubernetes

go 1.24.0

require (
	k8s.io/api v0.34.2 // indirect
	k8s.io/apimachinery v0.34.2 // indirect
	k8s.io/kube-scheduler v0.34.2 // indirect
)
