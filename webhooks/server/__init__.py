"""The HTTPS server that answers AdmissionReviews: the app, its listener, TLS material, connection limits and rate-limited logging."""
