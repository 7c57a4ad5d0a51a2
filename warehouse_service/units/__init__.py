"""Computing units: starting, watching and stopping them through a launcher, their credentials and
certificates, and the port they call the registry on."""
