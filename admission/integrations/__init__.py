"""Job kinds Quartermaster admits, as pure conversions from the object to Workload
pod sets (no API calls: the Kubernetes adapter drives them). ``framework/`` is what every
kind shares, ``kinds/`` one module per kind, and above both ``registry`` lists the kinds
and ``ownership`` walks an object's owner chain through them."""
