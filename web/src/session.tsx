// Who is signed in and which tenant they look at: the app's only shared
// state, handed down by context.
import { createContext } from 'preact';
import { useContext } from 'preact/hooks';
import type { Schemas } from './api/client';

export type Tenant = Schemas['Tenant'] & { id: string; slug: string };

export interface TenantContext {
  tenant: Tenant;
  tenants: Tenant[];
  reloadTenants: () => void;
}

export const TenantCtx = createContext<TenantContext | null>(null);

export function useTenant(): TenantContext {
  const c = useContext(TenantCtx);
  if (!c) throw new Error('useTenant outside a tenant page');
  return c;
}
