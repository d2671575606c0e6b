"""The ground floor: pure logic, no Pulumi, no Azure client; rooms by concept (config, security, preflight, data)."""
